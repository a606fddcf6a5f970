// The official TypeScript SDK server (pinned by scripts/conformance/package-lock.json),
// stateful, with the SDK's in-memory event store: the peer for our client's interop test.
// Prints "ts-server listening on <url>" and serves until killed.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const transports = new Map();

function newServer() {
  const server = new Server({ name: 'ts-reference', version: '1.0.0' }, { capabilities: { tools: {}, logging: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      { name: 'echo', description: 'Echo text', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } },
      { name: 'reconnect', description: 'Closes its SSE stream, then logs and answers', inputSchema: { type: 'object', properties: {} } },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    if (req.params.name === 'echo') {
      return { content: [{ type: 'text', text: String(req.params.arguments?.text ?? '') }] };
    }
    if (req.params.name === 'reconnect') {
      extra.closeSSEStream?.();
      await new Promise((r) => setTimeout(r, 100));
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data: 'after close' } });
      return { content: [{ type: 'text', text: 'reconnected' }] };
    }
    throw new Error(`unknown tool ${req.params.name}`);
  });
  return server;
}

const httpServer = http.createServer(async (req, res) => {
  let body;
  if (req.method === 'POST') {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    body = JSON.parse(Buffer.concat(chunks).toString() || 'null');
  }
  const sid = req.headers['mcp-session-id'];
  let transport = sid ? transports.get(sid) : undefined;
  if (!transport) {
    if (sid || req.method !== 'POST') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' } }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new InMemoryEventStore(),
      retryInterval: 100,
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
    await newServer().connect(transport);
  }
  await transport.handleRequest(req, res, body);
});

httpServer.listen(0, '127.0.0.1', () => {
  console.log(`ts-server listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});
