"""PodGroup status: what the daemon knows of each gang (board.py), the status both PodGroup
APIs get from it (status.py, pure), and the kopf operator that writes it while this
replica leads (operator.py)."""
