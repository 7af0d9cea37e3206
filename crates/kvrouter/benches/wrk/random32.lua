-- wrk script: POST /generate with a fresh random prompt per request (no prefix reuse), 4 output
-- tokens; PROMPT_LEN tokens (default 32: the request scripts/compare/kvcompare/overhead.py sends).
-- usage: wrk -t2 -c32 -d10s -s benches/wrk/random32.lua http://127.0.0.1:PORT
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
local n = tonumber(os.getenv("PROMPT_LEN") or "32")
request = function()
  local ids = {}
  for i = 1, n do ids[i] = math.random(5, 250) end
  local body = '{"input_ids":[' .. table.concat(ids, ",") ..
    '],"sampling_params":{"max_new_tokens":4,"temperature":0}}'
  return wrk.format(nil, "/generate", nil, body)
end
