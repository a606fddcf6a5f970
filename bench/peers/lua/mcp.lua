-- wrk script for MCP Streamable HTTP POST load. Configured through the environment:
--   MCP_BODY        JSON-RPC body to POST (required)
--   MCP_SIDS        comma-separated Mcp-Session-Id values; requests round-robin over them
--                   (empty: no Mcp-Session-Id header)
--   MCP_PV          MCP-Protocol-Version header value (empty: header omitted)
--   MCP_ACCEPT      Accept header (default "application/json, text/event-stream")
--   MCP_HEADERS     extra headers, "Name: value" separated by ";" (2026-07-28 mirrored headers)
--   MCP_STOP_AFTER  optional: stop the (single) wrk thread after this many 2xx responses and
--                   create the file MCP_STOP_FILE (wrk's main thread only exits at -d or on
--                   SIGINT, so the caller watches for that file and sends SIGINT)
--   MCP_POOL        number of pre-generated requests (default 20000). Each carries a distinct
--                   JSON-RPC id (the first "id":N in MCP_BODY is rewritten): servers route
--                   responses by request id inside a session, so concurrent requests on one
--                   session with the same id would collide (rmcp then leaves all but one hanging).
-- done() prints one JSON line (latencies in microseconds) prefixed with "WRKJSON ".

local reqs = {}
local n = 0
local i = 0
local ok = 0

function init(args)
  local body = os.getenv("MCP_BODY") or error("MCP_BODY not set")
  local pv = os.getenv("MCP_PV") or ""
  local sids = os.getenv("MCP_SIDS") or ""
  local accept = os.getenv("MCP_ACCEPT") or ""
  if accept == "" then accept = "application/json, text/event-stream" end
  local extra = os.getenv("MCP_HEADERS") or ""
  local function headers(sid)
    local h = {
      ["Content-Type"] = "application/json",
      ["Accept"] = accept,
    }
    if pv ~= "" then h["MCP-Protocol-Version"] = pv end
    for name, value in string.gmatch(extra, "([^;:]+):%s*([^;]+)") do h[name] = value end
    if sid then h["Mcp-Session-Id"] = sid end
    return h
  end
  local hs = {}
  for sid in string.gmatch(sids, "[^,]+") do hs[#hs + 1] = headers(sid) end
  if #hs == 0 then hs[1] = headers(nil) end
  local pool = tonumber(os.getenv("MCP_POOL") or "") or 20000
  for k = 1, pool do
    local b = string.gsub(body, '"id":%d+', '"id":' .. (100 + k), 1)
    reqs[k] = wrk.format("POST", nil, hs[(k - 1) % #hs + 1], b)
  end
  n = #reqs
  local stop_after = tonumber(os.getenv("MCP_STOP_AFTER") or "")
  if stop_after then
    response = function(status, hdrs, b)
      if status >= 200 and status < 300 then ok = ok + 1 end
      if ok == stop_after then
        local f = io.open(os.getenv("MCP_STOP_FILE") or "/dev/null", "w")
        if f then f:write(ok) f:close() end
        wrk.thread:stop()
      end
    end
  end
end

function request()
  i = i % n + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
