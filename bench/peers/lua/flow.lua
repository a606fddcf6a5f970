-- wrk script: a legacy client's whole life, over and over, one session at a time per thread:
-- initialize, notifications/initialized, FLOW_CALLS tools/call echo (default 1), DELETE
-- (FLOW_DELETE=0: none, each session is left idle and counts once its last step is answered).
-- Run with as many threads as connections (-tN -cN): each thread's Lua state follows its one
-- connection's session. A session counts once its DELETE is answered 2xx; a failed
-- initialize (or one without a session id) starts the next session over. done() prints
-- sessions a second, the requests not answered 2xx and wrk's socket errors.
local step, sid, calls = 0, nil, tonumber(os.getenv("FLOW_CALLS") or "") or 1
local delete = os.getenv("FLOW_DELETE") ~= "0"
-- Steps of one session: initialize, initialized, the calls, and the DELETE if any.
local steps = 2 + calls + (delete and 1 or 0)
local bad, done_sessions = 0, 0
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
  local ok = status >= 200 and status < 300
  if not ok then bad = bad + 1 end
  if step == 0 then
    sid = headers["mcp-session-id"] or headers["Mcp-Session-Id"]
    if not ok or sid == nil then
      wrk.thread:set("bad", bad)
      return
    end
  elseif step == steps - 1 and ok then
    done_sessions = done_sessions + 1
  end
  step = (step + 1) % steps
  wrk.thread:set("bad", bad)
  wrk.thread:set("sessions", done_sessions)
end

function done(summary, latency, requests)
  local b, n = 0, 0
  for _, t in ipairs(threads) do
    b = b + (tonumber(t:get("bad")) or 0)
    n = n + (tonumber(t:get("sessions")) or 0)
  end
  local e = summary.errors
  io.write(string.format(
    "FLOW sessions=%d sessions/s=%.0f requests=%d not_2xx=%d socket_errors=%d p99_us=%d\n",
    n, n / (summary.duration / 1e6), summary.requests, b,
    e.connect + e.read + e.write + e.timeout, latency:percentile(99)))
end
