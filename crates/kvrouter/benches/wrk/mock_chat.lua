-- wrk script: small non-streaming miles-shaped chat requests against sglang-mock.
-- usage: wrk -t1 -c32 -d10s -s benches/wrk/mock_chat.lua http://127.0.0.1:PORT
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"default","messages":[{"role":"user","content":"hi"}],"input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20],"logprobs":true,"return_meta_info":true,"max_tokens":8}'
