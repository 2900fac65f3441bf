package limiter

import "github.com/redis/rueidis"

// gcraScript is gcra for one or two keys in one round trip: a request passes
// only when every key allows it, and only then is every key charged, so a
// refusal by one ceiling never spends another's allowance.
//
// KEYS: the quota keys (hashes: t = theoretical arrival time in µs, e = set
// while a refusal episode is open). ARGV: for each key its emission interval
// (µs) and burst, then the time in µs, or "" to read it from Redis TIME (tests
// pass a fake clock here; the server never does).
//
// Returns {allowed, key index, retry µs, remaining, reset µs, first}: for a
// refusal the key that refused longest, with first = 1 when this refusal opened
// the key's episode; for an allowance the key with the fewest requests left.
//
// A refusal episode lasts until the key is whole again: it ends when a
// request finds the key back to its full burst (its tat passed, or the key
// expired). A client that keeps hammering earns one request per emission
// interval and is refused in between; those allowances do not end its
// episode, so the episode's first refusal is reported once, not once per
// emission interval.
//
// A key expires when its tat passes: from then on it would say what an absent
// key says. TIME before any write is allowed since Redis 5 (effects
// replication), and is the default from Redis 7.
var gcraScript = rueidis.NewLuaScript(`
local n = #KEYS
local now = ARGV[2*n+1]
if now ~= nil and now ~= '' then
  now = tonumber(now)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nexts, whole = {}, {}
local refused, rkey, retry, rreset = false, 0, -1, 0
local akey, arem, areset = 0, 0, 0
for i = 1, n do
  local em = tonumber(ARGV[2*i-1])
  local burst = tonumber(ARGV[2*i])
  local tat = now
  local v = redis.call('HGET', KEYS[i], 't')
  whole[i] = true
  if v then
    tat = tonumber(v)
    if tat <= now then tat = now else whole[i] = false end
  end
  local nxt = tat + em
  local allowat = nxt - burst * em
  if now < allowat then
    refused = true
    if allowat - now > retry then
      retry, rkey, rreset = allowat - now, i, tat - now
    end
  else
    nexts[i] = nxt
    local rem = math.floor((now - allowat) / em)
    if akey == 0 or rem < arem then
      akey, arem, areset = i, rem, nxt - now
    end
  end
end
if refused then
  local first = redis.call('HSETNX', KEYS[rkey], 'e', '1')
  return {0, rkey, retry, 0, rreset, first}
end
for i = 1, n do
  redis.call('HSET', KEYS[i], 't', string.format('%.0f', nexts[i]))
  if whole[i] then redis.call('HDEL', KEYS[i], 'e') end
  redis.call('PEXPIRE', KEYS[i], math.ceil((nexts[i] - now) / 1000))
end
return {1, akey, 0, arem, areset, 0}
`)
