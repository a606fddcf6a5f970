"""The README's library example (runtime/examples/one_tool.rs, the `Server` facade) serves its
tool to the official Python SDK client in both modes (legacy; auto, which finds
the 2026-07-28 era by `server/discover`), and stops cleanly on SIGINT.

MCP_EXAMPLE_BIN names the built example (scripts/python-sdk.sh sets it)."""

import os
import select
import signal
import subprocess

import pytest
from mcp import Client

EXAMPLE_BIN = os.environ.get("MCP_EXAMPLE_BIN", "target/debug/examples/one_tool")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    # Its working directory is a temporary one: the example's ledger (./mcp-host.db) lands
    # there, not in the repository.
    proc = subprocess.Popen(
        [os.path.abspath(EXAMPLE_BIN), "127.0.0.1:0"],
        cwd=tmp_path_factory.mktemp("example"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert select.select([proc.stdout], [], [], 30)[0], "the example printed nothing within 30 s"
        line = proc.stdout.readline()
        assert line.startswith("serving on "), f"unexpected first line: {line!r}"
        yield proc, line.split()[-1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.anyio
@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_the_library_example_serves_its_tool(example, mode, version):
    _, url = example
    async with Client(url, mode=mode) as client:
        assert client.protocol_version == version
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["greet"]
        result = await client.call_tool("greet", {"name": "Ada"})
        assert not result.is_error
        assert result.content[0].text == "Hello, Ada!"


def test_the_library_example_stops_cleanly_on_sigint(example):
    proc, _ = example
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    rest = proc.stdout.read()
    assert "drained: true" in rest and "marked: Clean" in rest, rest
