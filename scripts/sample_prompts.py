"""Writes console/bench/sample_prompts.jsonl, the prompts `capcon bench` replays without --prompts.

    python scripts/sample_prompts.py           # rewrite the file
    python scripts/sample_prompts.py --check   # exit 1 if the file differs from what this writes

200 requests in the JSONL format console/bench/prompts.py reads: chats (`messages`, some with a
system turn and an earlier exchange) and plain completions (`prompt`), short questions and long
contexts, each with a `max_tokens`. Every word is written here from small word lists and a seeded
random generator, so the file is the same on every run and holds no text from anywhere else. It is
an assistant-like mix for trying the command; a capacity to plan with is measured on your own prompts.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "console" / "bench" / "sample_prompts.jsonl"
COUNT = 200
SEED = 2026

SYSTEMS = (
    "You are a concise assistant for an engineering team. Answer in plain language.",
    "You are a helpful support agent. Be polite, specific and brief.",
    "You review code. Point out bugs first, then style.",
    "You are a writing assistant. Keep the author's voice.",
    "You answer questions about internal tools. Say when you are unsure.",
)
SERVICES = (
    "billing", "search", "checkout", "notifications", "inventory", "login", "reporting", "uploads",
    "scheduler", "payments", "recommendations", "audit log", "image resizer", "export queue",
)  # fmt: skip
THINGS = (
    "a retry policy", "a cache", "a rate limiter", "a message queue", "a feature flag", "a database index",
    "a load balancer", "a circuit breaker", "a cron job", "a health check", "a connection pool",
    "a schema migration", "a canary release", "a backup schedule", "an on-call rotation",
)  # fmt: skip
LANGUAGES = ("Python", "Go", "TypeScript", "Rust", "Java", "SQL", "Bash")
FUNCTIONS = (
    "parses a duration like 1h30m into seconds",
    "merges overlapping time intervals",
    "returns the median of a stream of numbers",
    "checks whether a string is a valid IPv4 address",
    "groups log lines by request id",
    "rounds a price to the nearest cent without floating-point error",
    "retries a call with exponential backoff and jitter",
    "finds the busiest five-minute window in a list of timestamps",
    "deduplicates records by key, keeping the newest",
    "splits a list into batches of at most n items",
)
AUDIENCES = ("a new engineer", "a product manager", "a customer", "a student", "the finance team")
TONES = ("friendly", "formal", "short", "detailed", "neutral")
PEOPLE = ("Ana", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kai", "Lena")
VERBS = ("rose", "fell", "stalled", "doubled", "recovered", "spiked", "drifted", "held steady")
METRICS = ("latency", "error rate", "queue depth", "CPU use", "memory use", "request rate", "disk use")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ACTIONS = (
    "rolled back the last deploy", "added two replicas", "raised the timeout", "cleared the cache",
    "paused the batch jobs", "opened a ticket with the vendor", "moved traffic to the other region",
    "restarted the worker pool", "turned the feature flag off", "increased the connection limit",
)  # fmt: skip


def _log(rng: random.Random, lines: int) -> str:
    out = []
    minute = rng.randrange(8 * 60, 10 * 60)
    for _ in range(lines):
        minute += rng.randrange(1, 4)
        out.append(
            f"{minute // 60:02d}:{minute % 60:02d} {rng.choice(SERVICES)} {rng.choice(METRICS)} "
            f"{rng.randrange(2, 990)} ({rng.choice(VERBS)})"
            + (f"; {rng.choice(PEOPLE)} {rng.choice(ACTIONS)}" if rng.random() < 0.4 else "")
        )
    return "\n".join(out)


def _notes(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        person, service = rng.choice(PEOPLE), rng.choice(SERVICES)
        out.append(
            rng.choice(
                (
                    f"{person} said the {service} {rng.choice(METRICS)} {rng.choice(VERBS)} after {DAYS[rng.randrange(7)]}'s release.",
                    f"We agreed to add {rng.choice(THINGS)} to {service} before the end of the month.",
                    f"{person} will check whether {rng.choice(THINGS)} explains the {rng.choice(METRICS)} on {service}.",
                    f"The {service} team {rng.choice(ACTIONS)} and will report back on {DAYS[rng.randrange(7)]}.",
                    f"Open question: does {service} need {rng.choice(THINGS)}, or is the current setup enough?",
                )
            )
        )
    return " ".join(out)


def _code(rng: random.Random) -> str:
    name = rng.choice(("total", "window", "batch", "items", "seen", "result"))
    limit = rng.randrange(2, 50)
    return "\n".join(
        (
            f"def process({name}, limit={limit}):",
            "    out = []",
            f"    for i in range(len({name})):",
            f"        if {name}[i] > limit:",
            f"            out.append({name}[i] / (i - {rng.randrange(1, 4)}))",
            "    return out",
        )
    )


def _question(rng: random.Random) -> tuple[str, int]:
    kind = rng.randrange(12)
    service, thing = rng.choice(SERVICES), rng.choice(THINGS)
    if kind == 0:
        return f"What is {thing}, and when does {service} need one?", rng.choice((96, 160, 256))
    if kind == 1:
        return f"Write a {rng.choice(LANGUAGES)} function that {rng.choice(FUNCTIONS)}. Include a short test.", 384
    if kind == 2:
        return (
            f"Explain {thing} to {rng.choice(AUDIENCES)} in a {rng.choice(TONES)} tone, in at most five sentences.",
            rng.choice((128, 192)),
        )
    if kind == 3:
        return f"Summarise these meeting notes in three bullet points:\n\n{_notes(rng, rng.randrange(4, 14))}", 160
    if kind == 4:
        return (
            f"Here is the {service} log from this morning. What happened, and what should we check first?\n\n"
            f"{_log(rng, rng.randrange(6, 30))}",
            rng.choice((256, 384)),
        )
    if kind == 5:
        return f"Find the bug in this code and suggest a fix:\n\n{_code(rng)}", 256
    if kind == 6:
        person = rng.choice(PEOPLE)
        return (
            f"Draft a {rng.choice(TONES)} email to {person} saying the {service} change moves to "
            f"{rng.choice(DAYS)} because {rng.choice(PEOPLE)} {rng.choice(ACTIONS)}.",
            192,
        )
    if kind == 7:
        return f"Give me a checklist for adding {thing} to {service}.", 256
    if kind == 8:
        return f"Compare {thing} and {rng.choice(THINGS)} for {service}: pros, cons, and when to pick each.", 384
    if kind == 9:
        return f"Rewrite this sentence to be clearer: {_notes(rng, 1)}", 64
    if kind == 10:
        a, b = rng.randrange(2, 500), rng.randrange(2, 60)
        return f"{service} handles {a} requests per second and each takes {b} ms. How many are in flight?", 96
    return f"List five questions to ask before changing {thing} in {service}.", 128


def build() -> str:
    rng = random.Random(SEED)
    lines = []
    for _ in range(COUNT):
        text, max_tokens = _question(rng)
        style = rng.random()
        if style < 0.3:  # a completion: the prompt as a document to continue
            item: dict = {"prompt": text + "\n\nAnswer:", "max_tokens": max_tokens}
        else:
            messages = []
            if style < 0.7:
                messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
            if style > 0.85:  # a second turn: the first exchange comes first
                first, _ = _question(rng)
                messages.append({"role": "user", "content": first})
                messages.append({"role": "assistant", "content": _notes(rng, rng.randrange(1, 4))})
            messages.append({"role": "user", "content": text})
            item = {"messages": messages, "max_tokens": max_tokens}
        lines.append(json.dumps(item, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if argv[1:] == ["--check"]:
        same = TARGET.exists() and TARGET.read_text(encoding="utf-8") == text
        print(f"{TARGET.name}: {'up to date' if same else 'differs from what this script writes'}")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET} ({len(text.encode()):,} bytes, {COUNT} prompts)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
