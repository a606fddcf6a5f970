-- wrk script: a legacy client's whole life, over and over, one session at a time per thread:
-- initialize, notifications/initialized, FLOW_CALLS tools/call echo (default 1), DELETE.
-- Run with as many threads as connections (-tN -cN): each thread's Lua state follows its one
-- connection's session. done() prints sessions and requests that did not answer 2xx.
local step, sid, calls, bad = 0, nil, tonumber(os.getenv("FLOW_CALLS") or "") or 1, 0
local pv = "2025-11-25"
local init_body = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"'
  .. pv .. '","capabilities":{},"clientInfo":{"name":"wrk-flow","version":"1"}}}'
local initialized = '{"jsonrpc":"2.0","method":"notifications/initialized"}'
local call = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
local threads = {}

function setup(thread) table.insert(threads, thread) end

function request()
  local h = { ["Content-Type"] = "application/json", ["Accept"] = "application/json, text/event-stream" }
  if step == 0 then return wrk.format("POST", nil, h, init_body) end
  h["Mcp-Session-Id"] = sid
  h["MCP-Protocol-Version"] = pv
  if step == 1 then return wrk.format("POST", nil, h, initialized) end
  if step <= 1 + calls then return wrk.format("POST", nil, h, call) end
  return wrk.format("DELETE", nil, h)
end

function response(status, headers, body)
  if status < 200 or status >= 300 then bad = bad + 1 end
  if step == 0 then sid = headers["mcp-session-id"] or headers["Mcp-Session-Id"] end
  step = (step + 1) % (3 + calls)
  wrk.thread:set("bad", bad)
end

function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + (tonumber(t:get("bad")) or 0) end
  local per = 3 + calls
  io.write(string.format("FLOW sessions/s=%.0f requests=%d not_2xx=%d p99_us=%d\n",
    summary.requests / per / (summary.duration / 1e6), summary.requests, b, latency:percentile(99)))
end
