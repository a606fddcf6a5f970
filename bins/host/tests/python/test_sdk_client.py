"""The official Python SDK client (PyPI `mcp` 2.x, mode="legacy") against a real mcp-host.

MCP_HOST_BIN names the binary; each test module starts its own host on a free loopback port.
"""

import os
import select
import subprocess

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HOST_BIN = os.environ.get("MCP_HOST_BIN", "target/debug/mcp-host")


@pytest.fixture(scope="module")
def url():
    # MCP_HOST_EXIT_WITH_PARENT: the host exits by itself if pytest is killed before the
    # finally below runs.
    proc = subprocess.Popen(
        [HOST_BIN, "--port", "0", "--admin-port", "0", "--retry-ms", "200"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MCP_HOST_EXIT_WITH_PARENT": "1"},
    )
    try:
        ready = select.select([proc.stdout], [], [], 30)[0]
        assert ready, "mcp-host printed nothing within 30 s"
        line = proc.stdout.readline()
        assert line.startswith("mcp-host listening on "), f"unexpected first line: {line!r}"
        yield line.split()[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def recording_client(seen):
    """An httpx2 client that records (method, last-event-id) of every request it sends."""
    http = create_mcp_http_client()

    async def record(request):
        seen.append((request.method, request.headers.get("last-event-id")))

    http.event_hooks["request"].append(record)
    return http


@pytest.mark.anyio
async def test_connect_list_tools_and_call_a_tool(url):
    async with Client(url, mode="legacy") as client:
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert {"echo", "test_reconnection", "test_simple_text"} <= names
        result = await client.call_tool("echo", {"text": "hello from python"})
        assert not result.is_error
        assert result.content[0].text == "hello from python"


@pytest.mark.anyio
async def test_call_whose_stream_closes_after_priming_completes_through_get_resume(url):
    seen = []
    async with recording_client(seen) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            result = await client.call_tool("test_reconnection", {})
            assert "Reconnection test completed successfully" in result.content[0].text
    resumes = [cursor for method, cursor in seen if method == "GET" and cursor]
    assert resumes, f"the result must arrive on a GET with Last-Event-ID; requests were {seen}"


@pytest.mark.anyio
async def test_tool_error_is_a_result_not_an_exception(url):
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool("test_error_handling", {})
        assert result.is_error
