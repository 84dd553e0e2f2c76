"""The writer's hand-off queue: bounded, blocking when full, first in first out, nothing lost."""

from __future__ import annotations

import queue
import threading

import pytest

from hookbus._writers._handoff import Handoff


def test_it_holds_maxsize_entries_in_order_and_refuses_the_next() -> None:
    entries: Handoff[int] = Handoff(3)
    for n in range(3):
        entries.put_nowait(n)
    with pytest.raises(queue.Full):
        entries.put_nowait(3)
    with pytest.raises(queue.Full):
        entries.put(3, timeout=0.01)  # nobody takes: no room comes
    assert [entries.get_nowait() for _ in range(3)] == [0, 1, 2]
    assert entries.empty()
    with pytest.raises(queue.Empty):
        entries.get_nowait()
    with pytest.raises(queue.Empty):
        entries.get(timeout=0.01)


def test_many_putters_through_a_small_queue_lose_nothing_and_keep_each_putters_order() -> None:
    entries: Handoff[tuple[int, int]] = Handoff(4)
    putters, each = 4, 3000
    taken: list[tuple[int, int]] = []
    most = 0

    def take() -> None:
        nonlocal most
        for _ in range(putters * each):
            taken.append(entries.get())  # blocks on an empty queue: a lost wake-up hangs here
            most = max(most, len(entries._entries) + 1)

    def put(who: int) -> None:
        for n in range(each):
            while True:
                try:
                    entries.put((who, n), timeout=0.05)  # blocks on a full queue
                    break
                except queue.Full:
                    continue

    threads = [threading.Thread(target=take, daemon=True)]
    threads += [threading.Thread(target=put, args=(who,), daemon=True) for who in range(putters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert len(taken) == putters * each
    for who in range(putters):
        assert [n for w, n in taken if w == who] == list(range(each))
    assert most <= 4  # the bound held with several putters at once


class _HeldWakeUp(threading.Event):
    """The taker's wake-up, counting its sets; a woken taker waits for ``go`` before it goes on."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0
        self.go = threading.Event()

    def set(self) -> None:
        self.sets += 1
        super().set()

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        self.go.wait(10)
        return woken


def test_puts_while_the_taker_sleeps_wake_it_once_and_it_takes_them_all_in_order() -> None:
    # Until the woken taker runs (on a busy machine: a whole switch interval of the GIL), every put
    # that still saw it sleeping set its event again, each set costing the putter (the training
    # thread) as much as the put itself.
    entries: Handoff[int] = Handoff(1000)
    wake_up = entries._filled = _HeldWakeUp()
    taken: list[int] = []
    taker = threading.Thread(target=lambda: taken.extend(entries.get() for _ in range(100)), daemon=True)
    taker.start()
    while not entries._taker_sleeps:  # it announced its sleep: the next put must wake it
        threading.Event().wait(0.001)
    for n in range(100):
        entries.put_nowait(n)
    assert wake_up.sets == 1
    wake_up.go.set()
    taker.join(10)
    assert not taker.is_alive()
    assert taken == list(range(100))
