"""neuron-top's terminal driver: keys arrive, the input thread sleeps while there are none, stops at once."""

from __future__ import annotations

import asyncio
import os
import selectors
import threading
import time
from typing import Any

import pytest
from textual import events

from neurontools.top import driver as driver_module
from neurontools.top.driver import QuietLinuxDriver


class CountingSelector(selectors.SelectSelector):
    calls = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        CountingSelector.calls += 1
        return super().select(timeout)


def test_input_thread_reads_keys_then_sleeps_until_input_or_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module.selectors, "SelectSelector", CountingSelector)
    monkeypatch.setattr(driver_module, "TICKING_AFTER_INPUT", 0.3)

    async def scenario() -> None:
        got: list[Any] = []

        class Recording(QuietLinuxDriver):
            def process_message(self, message: Any) -> None:
                got.append(message)

        read_fd, write_fd = os.pipe()
        driver = Recording(None)  # type: ignore[arg-type]  # no app: messages are recorded
        driver.fileno = read_fd
        thread = threading.Thread(target=driver.run_input_thread)
        thread.start()
        try:
            os.write(write_fd, b"q")
            deadline = time.monotonic() + 2
            while not any(isinstance(m, events.Key) and m.key == "q" for m in got):
                assert time.monotonic() < deadline, f"no key q: {got}"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.6)  # past the ticking window that follows input
            calls = CountingSelector.calls
            await asyncio.sleep(0.5)
            assert CountingSelector.calls == calls  # asleep: Textual's own driver would wake 5 times here
            started = time.monotonic()
            driver.exit_event.set()
            thread.join(2)
            assert not thread.is_alive() and time.monotonic() - started < 0.5
            driver.exit_event.clear()  # what Textual does after the join: the wake-up pipe is drained
            assert not driver.exit_event.is_set()
        finally:
            driver.exit_event.set()
            thread.join(2)
            driver.close()
            os.close(read_fd)
            os.close(write_fd)

    asyncio.run(scenario())
