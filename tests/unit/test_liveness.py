"""The liveness rule (webhook/liveness.py): stalled only when a call has been in flight past the window
and no call returned within it; on a virtual clock."""

from __future__ import annotations

from landb_webhook.webhook.liveness import CallProgress

WINDOW = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_process_is_never_stalled() -> None:
    clock = Clock()
    progress = CallProgress(WINDOW, clock=clock)
    clock.now += 10 * WINDOW
    assert progress.stalled() is None


def test_a_call_in_flight_past_the_window_with_nothing_returned_is_a_stall_until_it_returns() -> None:
    clock = Clock()
    progress = CallProgress(WINDOW, clock=clock)
    stuck = progress.started()
    clock.now += WINDOW
    assert progress.stalled() is None  # not past the window yet
    clock.now += 1
    reason = progress.stalled()
    assert reason is not None
    assert "1 webhook call(s) in flight, the oldest for 61 s" in reason
    progress.ended(stuck, returned=True)
    assert progress.stalled() is None
    assert progress.in_flight() == 0


def test_calls_that_keep_returning_keep_the_process_alive_beside_one_stuck_call() -> None:
    """A failing or slow upstream: its calls return (errors, past their deadline), so work goes on."""
    clock = Clock()
    progress = CallProgress(WINDOW, clock=clock)
    progress.started()  # stuck for good
    for _ in range(10):
        clock.now += WINDOW / 2
        progress.ended(progress.started(), returned=True)
        assert progress.stalled() is None
    clock.now += WINDOW + 1
    assert progress.stalled() is not None  # the others stopped returning: only the stuck one is left


def test_a_call_cancelled_in_the_queue_is_no_progress_and_no_longer_in_flight() -> None:
    clock = Clock()
    progress = CallProgress(WINDOW, clock=clock)
    stuck = progress.started()
    clock.now += WINDOW / 2
    progress.ended(progress.started(), returned=False)  # queued behind the stuck one, cancelled
    clock.now += WINDOW / 2 + 1
    assert progress.in_flight() == 1
    assert progress.stalled() is not None
    progress.ended(stuck, returned=True)
    assert progress.stalled() is None


def test_start_up_counts_as_progress() -> None:
    clock = Clock()
    progress = CallProgress(WINDOW, clock=clock)
    clock.now += WINDOW - 1
    progress.started()
    clock.now += 2  # the call is young, the start-up recent enough
    assert progress.stalled() is None
