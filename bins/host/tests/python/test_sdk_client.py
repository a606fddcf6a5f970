"""The official Python SDK client (PyPI `mcp` 2.x, mode="legacy") against a real mcp-host
(started by conftest.py)."""

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


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
