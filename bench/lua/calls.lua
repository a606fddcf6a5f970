-- wrk script for bench/nodes.py: POST one JSON-RPC body over and over. Environment:
--   BODY    the body; its first "id":N becomes a distinct id per request of the pool
--   SIDS    comma-separated Mcp-Session-Id values, taken in turn (empty: no session header)
--   HEADERS more headers, "Name: value" separated by "|" (Accept, MCP-Protocol-Version, ...)
--   POOL    requests prepared per thread (default 10000), sent in turn
-- done() prints one line "CALLSJSON {...}": requests, errors by kind, latency in µs.

local pool = {}
local next_one = 0

function init(args)
  local body = os.getenv("BODY") or error("BODY not set")
  local headers = { ["Content-Type"] = "application/json" }
  for pair in string.gmatch(os.getenv("HEADERS") or "", "[^|]+") do
    local name, value = string.match(pair, "^%s*([^:]+):%s*(.-)%s*$")
    if name then headers[name] = value end
  end
  local sids = {}
  for sid in string.gmatch(os.getenv("SIDS") or "", "[^,]+") do sids[#sids + 1] = sid end
  local size = tonumber(os.getenv("POOL") or "") or 10000
  for k = 1, size do
    local h = {}
    for name, value in pairs(headers) do h[name] = value end
    if #sids > 0 then h["Mcp-Session-Id"] = sids[(k - 1) % #sids + 1] end
    local b = string.gsub(body, '"id":%d+', '"id":' .. (1000 + k), 1)
    pool[k] = wrk.format("POST", nil, h, b)
  end
end

function request()
  next_one = next_one % #pool + 1
  return pool[next_one]
end

function done(summary, latency, requests)
  local e = summary.errors
  print(string.format(
    'CALLSJSON {"requests":%d,"duration_us":%d,"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
