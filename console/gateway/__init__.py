"""The gateway (server room): an OpenAI-compatible front door that enforces the overflow policy.

It proxies `/v1/completions`, `/v1/chat/completions`, `/v1/models` and `/health` to
a fleet's replicas (least outstanding requests over the healthy ones), holds a
lease on the replica for the whole response, and asks `console.overflow` what to
do with every arrival: forward, wait in the queue, go to the hosted endpoint, or
be refused with a Retry-After. The policy is switched at runtime through the
admin API on its own listener. `server.Gateway` is the whole of it; the verb is
`console.commands.gateway`.
"""
