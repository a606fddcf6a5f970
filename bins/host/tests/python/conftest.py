"""Shared fixtures: each test module starts its own mcp-host on a free loopback port.

MCP_HOST_BIN names the binary.
"""

import os
import select
import subprocess

import pytest

HOST_BIN = os.environ.get("MCP_HOST_BIN", "target/debug/mcp-host")


@pytest.fixture(scope="module")
def url():
    # MCP_HOST_EXIT_WITH_PARENT: the host exits by itself if pytest is killed before the
    # finally below runs.
    proc = subprocess.Popen(
        [HOST_BIN, "--port", "0", "--admin-port", "0", "--retry-ms", "200", "--packs", "conformance,echo,basket"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MCP_HOST_EXIT_WITH_PARENT": "1"},
    )
    try:
        line = first_line(proc, "mcp-host")
        assert line.startswith("mcp-host listening on "), f"unexpected first line: {line!r}"
        yield line.split()[-1]
    finally:
        stop(proc)


def first_line(proc, what):
    """The first line `proc` prints, within 30 s."""
    ready = select.select([proc.stdout], [], [], 30)[0]
    assert ready, f"{what} printed nothing within 30 s"
    return proc.stdout.readline()


def stop(proc):
    """SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def anyio_backend():
    return "asyncio"


