-- wrk script: small non-streaming /generate requests against sglang-mock.
-- usage: wrk -t1 -c32 -d10s -s benches/wrk/mock_generate.lua http://127.0.0.1:PORT
wrk.method = "POST"
wrk.path = "/generate"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"sampling_params":{"max_new_tokens":8}}'
