-- wrk script for bench/overload.py's part 2: the same mixed load as its Python client, from a
-- load generator written in C (wrk, Debian's package) so that the client does not take the
-- gateway's CPU on a small machine.
--
--   wrk -t1 -c200 -d60s --timeout 60s -s bench/overload.lua URL -- OUT WARM DELAY SHARE NONCE
--
-- OUT: each thread appends "<x-cache or error STATUS> <seconds>" per response to OUT.<thread>;
-- WARM: how many stored questions ("Stored question I about TOPIC?", as overload.py stored
-- them); DELAY: the fake upstream's delay for fresh questions; SHARE: the share of requests
-- that repeat a stored question; NONCE: makes this run's fresh questions new to the cache.
--
-- Latency per request: every request carries its own x-request-id; the gateway echoes it as
-- x-request-id on a cached answer and as x-cachegate-request-id beside the upstream's own on a
-- fresh one, so a response is matched to the moment its request was written (CLOCK_MONOTONIC
-- through LuaJIT's ffi).

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } cg_timespec;
int clock_gettime(int clk_id, cg_timespec *tp);
]]
local ts = ffi.new("cg_timespec")
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local TOPICS = { "tax returns", "river fishing", "kernel modules", "sourdough", "solar panels",
  "chess openings", "bus timetables", "violin strings", "tide tables", "visa rules" }

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local out, warm, delay, share, nonce
local sent, started = 0, {}

function init(args)
  out = assert(io.open(args[1] .. "." .. tid, "w"))
  out:setvbuf("line") -- (a thread's Lua state is not closed when wrk exits)
  warm, delay, share, nonce = tonumber(args[2]), args[3], tonumber(args[4]), args[5]
  math.randomseed(1000 + tid)
end

local function body(question, fake)
  return '{"model": "fake-model", "messages": [{"role": "user", "content": "' .. question
      .. '"}]' .. fake .. '}'
end

function request()
  sent = sent + 1
  local id = "wrk-" .. nonce .. "-" .. tid .. "-" .. sent
  local payload
  if math.random() < share then
    local i = math.random(0, warm - 1)
    payload = body(string.format("Stored question %d about %s?", i, TOPICS[i % 10 + 1]), "")
  else
    local question = string.format("Fresh question %s-%d-%d about %s?", nonce, tid, sent,
      TOPICS[math.random(1, 10)])
    payload = body(question, ', "fake": {"delay": ' .. delay .. '}')
  end
  started[id] = now()
  return wrk.format("POST", "/v1/chat/completions",
    { ["Content-Type"] = "application/json", ["x-request-id"] = id }, payload)
end

function response(status, headers, _)
  local finished = now()
  local h = {}
  for k, v in pairs(headers) do h[string.lower(k)] = v end
  local id = h["x-cachegate-request-id"] or h["x-request-id"]
  local began = id and started[id]
  if id then started[id] = nil end
  local cache = h["x-cache"]
  if status ~= 200 or not cache then cache = "error-" .. status end
  out:write(cache, " ", began and string.format("%.6f", finished - began) or "-1", "\n")
end

function done(summary, _, _)
  local e = summary.errors
  io.write(string.format("wrk-summary requests=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, e.connect, e.read, e.write, e.status, e.timeout))
end
