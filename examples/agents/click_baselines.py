"""The bars a trained click agent must clear, measured by playing ``click_agent.py`` itself.

vlrl cannot play a random policy of a program it does not know (``eval.chance`` is False for an
external source), so this script does it: it serves the OpenAI chat API on localhost with a
scripted "model" and runs the agent's own episodes against it, on the held-out seeds vlrl
evaluates (``Evaluation.seed`` onwards).

- ``chance``: a uniformly random ``click(x, y)`` on the 160x120 screen at every turn.
- ``constant``: the best fixed point of an 8 x 6 grid of cell centres, clicked every turn,
  chosen on the seeds it is scored on (optimistic for a constant policy, so a strict bar).

    python examples/agents/click_baselines.py --episodes 64     # prints one JSON line
"""

import argparse
import json
import os
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click_agent

HELD_OUT_SEED = 1_000_000
"""vlrl's first held-out seed (``Evaluation.seed``)."""


class ScriptedModel(BaseHTTPRequestHandler):
    """Answers every chat request with ``click(x, y)`` from the server's ``next_point()``."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        x, y = self.server.next_point()
        reply = {
            "id": "scripted",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"click({x}, {y})"}}],
        }
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def success(seeds):
    return sum(click_agent.play(seed) > 0 for seed in seeds) / len(seeds)


def grid_points(cols, rows):
    w, h = click_agent.WIDTH, click_agent.HEIGHT
    return [((2 * c + 1) * w // (2 * cols), (2 * r + 1) * h // (2 * rows)) for r in range(rows) for c in range(cols)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--first-seed", type=int, default=HELD_OUT_SEED)
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ.update(OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_port}/v1", OPENAI_API_KEY="scripted")

    rng = random.Random(0)
    server.next_point = lambda: (rng.randrange(click_agent.WIDTH), rng.randrange(click_agent.HEIGHT))
    chance = success(seeds)
    by_point = {}
    for point in grid_points(8, 6):
        server.next_point = lambda point=point: point
        by_point[point] = success(seeds)
    best = max(by_point, key=by_point.get)
    server.shutdown()
    print(json.dumps({"episodes": len(seeds), "first_seed": seeds[0], "chance": chance, "constant": by_point[best], "constant_point": best}))


if __name__ == "__main__":
    main()
