"""NEURON_EMULATOR_ADDR and the default socket path (DESIGN.md contract)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neurontools.sources.address import AddressError, parse_address, resolve_address


def test_default_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NEURON_EMULATOR_ADDR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert resolve_address().socket_path == str(tmp_path / "neuron-emulator.sock")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}.sock"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}.sock"


def test_env_and_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_EMULATOR_ADDR", "http://127.0.0.1:8123")
    addr = resolve_address()
    assert (addr.host, addr.port, str(addr)) == ("127.0.0.1", 8123, "http://127.0.0.1:8123")
    assert resolve_address("/x/y.sock").socket_path == "/x/y.sock"
    assert parse_address("unix:///run/n.sock").socket_path == "/run/n.sock"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "http://127.0.0.1",
        "http://127.0.0.1:0",
        "http://h:99999",
        "https://h:1",
        "ftp://x",
        "http://h:80/path",
    ],
)
def test_bad_addresses(text: str) -> None:
    with pytest.raises(AddressError):
        parse_address(text)


def test_bad_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_EMULATOR_ADDR", "ftp://x")
    with pytest.raises(AddressError, match="NEURON_EMULATOR_ADDR"):
        resolve_address()
