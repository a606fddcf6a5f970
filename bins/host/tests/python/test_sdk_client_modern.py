"""The official Python SDK client (PyPI `mcp` 2.x) in its DEFAULT mode against a real mcp-host
(started by conftest.py): it must negotiate 2026-07-28, which the recorded HTTP exchange proves
(server/discover first, no initialize, no session id, no GET or DELETE)."""

import json

import anyio
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

MODERN = "2026-07-28"


def recording_client(seen):
    """An httpx2 client that records every request: method, headers and JSON body."""
    http = create_mcp_http_client()

    async def on_request(request):
        body = json.loads(request.content) if request.method == "POST" and request.content else None
        seen.append({"method": request.method, "headers": dict(request.headers), "body": body})

    http.event_hooks["request"].append(on_request)
    return http


@pytest.mark.anyio
async def test_default_mode_negotiates_2026_07_28_lists_calls_reports_progress_and_answers_mrtr(url):
    seen = []
    progress = []
    asked = []

    async def on_progress(p, total, message):
        progress.append(p)

    async def on_elicit(ctx, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Alice"})

    async with recording_client(seen) as http:
        async with Client(streamable_http_client(url, http_client=http), elicitation_callback=on_elicit, read_timeout_seconds=30, cache=None) as client:
            assert client.protocol_version == MODERN
            assert client.session.initialize_result is None

            names = {t.name for t in (await client.list_tools()).tools}
            assert {"echo", "test_tool_with_progress", "test_input_required_result_elicitation"} <= names

            r = await client.call_tool("echo", {"text": "hello modern"})
            assert not r.is_error and r.content[0].text == "hello modern"

            r = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
            assert not r.is_error
            with anyio.fail_after(5):  # the SDK runs progress callbacks as tasks of their own
                while len(progress) < 3:
                    await anyio.sleep(0.01)
            assert progress == [0.0, 50.0, 100.0]

            # The server answers input_required; the SDK asks the callback and retries.
            r = await client.call_tool("test_input_required_result_elicitation", {})
            assert r.content[0].text == "Hello, Alice!"
            assert asked == ["What is your name?"]

    methods = [e["body"]["method"] if e["body"] else e["method"] for e in seen]
    assert methods[0] == "server/discover", methods
    assert "initialize" not in methods and "notifications/initialized" not in methods, methods
    assert all(e["method"] == "POST" for e in seen), "no GET stream, no DELETE"
    assert not any("mcp-session-id" in e["headers"] for e in seen), "no session id, ever"
    for e in seen:
        assert e["headers"]["mcp-protocol-version"] == MODERN == e["body"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
    asks = [e["body"] for e in seen if e["body"]["method"] == "tools/call" and e["body"]["params"]["name"] == "test_input_required_result_elicitation"]
    assert len(asks) == 2 and asks[0]["id"] != asks[1]["id"], "one round trip, a new id for the retry"
    assert "user_name" in asks[1]["params"]["inputResponses"] and "requestState" in asks[1]["params"]


# The tasks extension, as a client extension of the SDK's own kind (ClientExtension with a
# ResultClaim on resultType "task"): the SDK advertises it in every request's capabilities and
# hands a task result to `_resolve`, which polls tasks/get (Mcp-Name: the task id) until the
# task is over, at the interval the server asks for.
from typing import Any, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim

TASKS = "io.modelcontextprotocol/tasks"


class CreateTaskResult(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskParams(types.RequestParams):
    task_id: str


class TasksGet(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class TaskState(types.Result):
    result_type: str = "complete"
    task_id: str
    status: str
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Tasks(ClientExtension):
    identifier = TASKS

    def __init__(self):
        self.created = []

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created.task_id)
        with anyio.fail_after(30):
            while True:
                state = await ctx.session.send_request(TasksGet(params=TaskParams(task_id=created.task_id)), TaskState)
                if state.status == "completed":
                    return types.CallToolResult.model_validate(state.result)
                assert state.status == "working", state
                await anyio.sleep((state.poll_interval_ms or 1000) / 1000)


@pytest.mark.anyio
async def test_default_mode_runs_the_basket_flow_with_handles_and_a_task(url):
    seen = []
    tasks = Tasks()
    async with recording_client(seen) as http:
        async with Client(streamable_http_client(url, http_client=http), extensions=[tasks], read_timeout_seconds=30, cache=None) as client:
            assert client.protocol_version == MODERN
            created = await client.call_tool("create_basket", {"items": [{"sku": "shoes"}]})
            basket = created.structured_content["basket_id"]
            assert basket.startswith("bsk_") and len(basket) == 28, basket
            added = await client.call_tool("add_item", {"basket_id": basket, "sku": "socks", "quantity": 2})
            assert added.structured_content["item_count"] == 3
            got = await client.call_tool("get_basket", {"basket_id": basket})
            assert [i["sku"] for i in got.structured_content["items"]] == ["shoes", "socks"]
            order = (await client.call_tool("checkout", {"basket_id": basket})).structured_content["order_id"]
            again = await client.call_tool("checkout", {"basket_id": basket})
            assert again.structured_content["order_id"] == order, "a retried checkout orders once"
            unknown = await client.call_tool("get_basket", {"basket_id": "bsk_" + "A" * 24})
            assert unknown.is_error and "Call create_basket" in unknown.content[0].text, unknown
            # A task: the SDK resolves it through the extension.
            r = await client.call_tool("slow_compute", {"seconds": 1, "label": "py"})
            assert not r.is_error and r.content[0].text == "py: computed in 1 s", r
            assert len(tasks.created) == 1

    bodies = [e["body"] for e in seen if e["body"]]
    assert not any("mcp-session-id" in e["headers"] for e in seen), "no session id, ever"
    call = next(b for b in bodies if b["method"] == "tools/call" and b["params"]["name"] == "slow_compute")
    assert TASKS in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"], call
    polls = [e for e in seen if e["body"] and e["body"]["method"] == "tasks/get"]
    assert polls and all(e["headers"]["mcp-name"] == tasks.created[0] for e in polls), polls
