"""Ctrl-C while the launcher starts a local worker is neither lost nor leaves the worker running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from submitit.local import local

from stateaware.launch.interrupt import workers_stop_with_launcher


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt here, even when the tests run in a background job (which ignores it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sleeper(started: list[subprocess.Popen], *, interrupt_first: bool):
    """A stand-in for submitit's ``start_controller``: optionally Ctrl-C ourselves, then start a long child."""

    def start_controller(*args, **kwargs):
        if interrupt_first:
            os.kill(os.getpid(), signal.SIGINT)  # arrives while the controller is being started
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(child)
        return child

    return start_controller


@pytest.fixture(params=["one thread", "another thread idle"])
def threads(request):
    """With another thread alive, the kernel hands it a Ctrl-C the main thread blocks."""
    if request.param == "one thread":
        yield
        return
    stop = threading.Event()
    idle = threading.Thread(target=stop.wait)
    idle.start()
    yield
    stop.set()
    idle.join()


def _deaf_to_sigint(pid: int) -> bool:
    """Whether SIGINT is blocked or ignored in ``pid`` (its /proc status masks)."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    bit = 1 << (signal.SIGINT - 1)
    return bool((int(fields["SigBlk"], 16) | int(fields["SigIgn"], 16)) & bit)


def test_a_ctrl_c_while_a_worker_starts_interrupts_the_launcher_and_kills_the_worker(
    monkeypatch, sigint_raises, threads
):
    started: list[subprocess.Popen] = []
    monkeypatch.setattr(local, "start_controller", _sleeper(started, interrupt_first=True))
    try:
        with pytest.raises(KeyboardInterrupt):
            with workers_stop_with_launcher():
                local.start_controller()  # the Ctrl-C held while it ran arrives on its return
        (child,) = started
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        for child in started:
            child.kill()
            child.wait()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_worker_starts_deaf_to_ctrl_c_and_the_launcher_does_not(monkeypatch, sigint_raises):
    started: list[subprocess.Popen] = []
    monkeypatch.setattr(local, "start_controller", _sleeper(started, interrupt_first=False))
    try:
        with workers_stop_with_launcher():
            (child,) = [local.start_controller()]
            assert child.stdout.readline() == "up\n"
            assert _deaf_to_sigint(child.pid)
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)  # raises on return, as the signal is to this process
        assert child.poll() is None  # the interrupt was caught inside the block: the worker keeps running
    finally:
        for child in started:
            child.kill()
            child.wait()
