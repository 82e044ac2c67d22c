"""NEURON_EMULATOR_ADDR and the default socket path (docs/emulator.md §The emulated instance, docs/security.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neurontools.sources.address import AddressError, is_local_host, parse_address, resolve_address, token_path


def test_default_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NEURON_EMULATOR_ADDR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert resolve_address().socket_path == str(tmp_path / "neuron-emulator.sock")
    assert token_path(7060) == str(tmp_path / "neuron-emulator-7060.token")
    # without it: a per-user directory, never a socket directly in /tmp (docs/security.md)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.delenv("TMPDIR", raising=False)
    assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}/daemon.sock"
    assert token_path(7060) == f"/tmp/neuron-emulator-{os.getuid()}/neuron-emulator-7060.token"
    for unusable in (str(tmp_path / "missing"), "relative/dir"):
        monkeypatch.setenv("XDG_RUNTIME_DIR", unusable)
        assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}/daemon.sock"
    # that directory under $TMPDIR when it is an absolute path
    monkeypatch.setenv("TMPDIR", str(tmp_path) + "/")
    assert resolve_address().socket_path == f"{tmp_path}/neuron-emulator-{os.getuid()}/daemon.sock"
    monkeypatch.setenv("TMPDIR", "relative")
    assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}/daemon.sock"


def test_env_and_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_EMULATOR_ADDR", "http://127.0.0.1:8123")
    addr = resolve_address()
    assert (addr.host, addr.port, str(addr)) == ("127.0.0.1", 8123, "http://127.0.0.1:8123")
    assert resolve_address("/x/y.sock").socket_path == "/x/y.sock"
    assert parse_address("unix:///run/n.sock").socket_path == "/run/n.sock"
    v6 = parse_address("http://[::1]:7060")
    assert (v6.host, v6.port, str(v6)) == ("::1", 7060, "http://[::1]:7060")


def test_local_hosts_are_the_ones_a_token_file_may_be_sent_to() -> None:
    for host in ("localhost", "127.0.0.1", "127.0.0.2", "::1", "0.0.0.0"):
        assert is_local_host(host), host
    for host in ("192.0.2.1", "2001:db8::1", "example.com", "daemon-host"):  # TEST-NET, documentation range
        assert not is_local_host(host), host


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
