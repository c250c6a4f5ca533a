"""The GangBoard: publishes from one thread, snapshots and wake-ups on another."""

from __future__ import annotations

import threading

from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangBoard, GangReport

X = GangAPI.COSCHEDULING
W = GangAPI.WORKLOAD


def test_subscribers_hear_only_what_changed() -> None:
    board = GangBoard()
    heard: list[frozenset[tuple[GangAPI, str]]] = []
    unsubscribe = board.subscribe(heard.append)
    a = GangReport(X, "ns/a", pending=2)
    b = GangReport(W, "ns/a", placed=1)  # the other API's namesake is another group
    board.publish([a, b])
    board.publish([a])  # the same report again: no wake-up
    board.publish([GangReport(X, "ns/a", pending=1, placed=1)])
    board.publish([], removed=[(W, "ns/a"), (W, "ns/gone")])
    assert heard == [
        frozenset({(X, "ns/a"), (W, "ns/a")}),
        frozenset({(X, "ns/a")}),
        frozenset({(W, "ns/a")}),
    ]
    assert board.get(X, "ns/a") == GangReport(X, "ns/a", pending=1, placed=1)
    assert board.get(W, "ns/a") is None
    unsubscribe()
    board.publish([GangReport(X, "ns/b")])
    assert len(heard) == 3
    assert set(board.snapshot()) == {(X, "ns/a"), (X, "ns/b")}


def test_members_counts_live_and_finished_pods() -> None:
    r = GangReport(X, "ns/a", pending=1, placed=2, running=3, succeeded=4, failed=5)
    assert r.members == 15


def test_concurrent_publishers_and_readers_see_whole_reports() -> None:
    board = GangBoard()
    stop = threading.Event()
    torn: list[GangReport] = []

    def read() -> None:
        while not stop.is_set():
            for r in board.snapshot().values():
                if r.pending + r.running != 100:  # every published report sums to 100
                    torn.append(r)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(2000):
        board.publish([GangReport(X, f"ns/g{i % 7}", pending=i % 100, running=100 - i % 100)])
    stop.set()
    reader.join()
    assert torn == []
    assert len(board.snapshot()) == 7
