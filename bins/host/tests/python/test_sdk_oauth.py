"""The official Python SDK client (PyPI `mcp` 2.x) in its OAuth mode against mcp-host as a
resource server and a real authorization server (scripts/oidc/provider.mjs: oidc-provider).
No token is handed to the client: it starts from the host's 401, reads the Protected Resource
Metadata it names, the authorization server's metadata, and gets a token with the client
credentials grant (no person needed), for the resource the host names. Both modes."""

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import first_line, stop

HOST_BIN = os.environ.get("MCP_HOST_BIN", "target/debug/mcp-host")
OIDC = Path(__file__).resolve().parents[4] / "scripts" / "oidc"


@pytest.fixture(scope="module")
def servers():
    """(issuer, MCP URL): the provider, and a host that trusts it, on free loopback ports."""
    provider = subprocess.Popen(
        [str(OIDC / "node_modules/.bin/node"), str(OIDC / "provider.mjs"), "--port", "0", "--exit-with-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    host = None
    try:
        line = first_line(provider, "the OAuth provider")
        assert line.startswith("listening on "), line
        issuer = line.split()[-1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        resource = f"http://127.0.0.1:{port}/mcp"
        host = subprocess.Popen(
            [HOST_BIN, "--port", str(port), "--admin-port", "0", "--packs", "conformance,echo",
             "--oauth-issuer", issuer, "--oauth-resource", resource,
             "--oauth-scopes-supported", "mcp,tools:read",
             "--set", 'auth.required_scopes=["mcp"]'],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "MCP_HOST_EXIT_WITH_PARENT": "1"},
        )
        line = first_line(host, "mcp-host")
        assert line.startswith("mcp-host listening on "), line
        yield issuer, line.split()[-1]
    finally:
        if host is not None:
            stop(host)
        stop(provider)


class Memory:
    """Token storage in memory."""

    def __init__(self):
        self.tokens = None
        self.info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.info

    async def set_client_info(self, info):
        self.info = info


def recorded(issuer, url, seen):
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=Memory(),
        client_id="jwt-es256",
        client_secret="jwt-es256-secret",
        scope="mcp tools:read",
        issuer=issuer,
    )
    http = create_mcp_http_client(auth=auth)

    async def on_response(response):
        # Never read the body here: a GET stream's does not end.
        seen.append((response.request.method, str(response.request.url), response.status_code,
                     response.headers.get("www-authenticate")))

    http.event_hooks["response"].append(on_response)
    return http


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", None])
async def test_the_sdk_discovers_the_authorization_server_from_the_401_and_calls_a_tool(servers, mode):
    issuer, url = servers
    seen = []
    async with recorded(issuer, url, seen) as http:
        kwargs = {"mode": mode} if mode else {}
        async with Client(streamable_http_client(url, http_client=http), **kwargs) as client:
            r = await client.call_tool("echo", {"text": "with a token"})
            assert not r.is_error and r.content[0].text == "with a token"

    first = seen[0]
    assert first[2] == 401, seen
    assert f'resource_metadata="{url.rsplit("/mcp", 1)[0]}/.well-known/oauth-protected-resource/mcp"' in first[3]
    urls = [u for _, u, _, _ in seen]
    prm = [u for u in urls if "/.well-known/oauth-protected-resource" in u]
    assert prm and prm[0].endswith("/.well-known/oauth-protected-resource/mcp"), urls
    assert any(u.startswith(issuer + "/.well-known/") for u in urls), "the AS metadata"
    token = [(m, u, s) for m, u, s, _ in seen if u == issuer + "/token"]
    assert token == [("POST", issuer + "/token", 200)], seen
    after = seen[seen.index(next(e for e in seen if e[1] == issuer + "/token")) + 1:]
    assert after and all(s in (200, 202, 204) for _, u, s, _ in after if u.startswith(url.rsplit("/mcp", 1)[0])), after
