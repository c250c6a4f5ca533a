"""PodGroup and ElasticQuota status: what the daemon knows of each gang (board.py) and of
each ElasticQuota (quota_board.py), the status both PodGroup APIs get from it (status.py,
pure), and the kopf operator that writes them while this replica leads (operator.py)."""
