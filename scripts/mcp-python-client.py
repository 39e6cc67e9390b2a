"""One entity's session through the official MCP Python SDK (PyPI `mcp`), as SPEC [C-22] asks.

Why it exists: the suite's own MCP client is Rust (rmcp); Claude Code and most agents use an
official SDK, which offers its model only the tools `tools/list` returned and ends a session with
`DELETE /mcp`. features/mcp_clients.feature runs this script (from the venv scripts/setup makes)
to see a gateway through such a client: it connects with the entity's bearer token over
streamable HTTP, lists the tools, calls the ones it was asked to (only if they were listed, as a
model would), ends the session, and prints one JSON object on stdout:

    {"sdk": "<mcp version>", "listed": [names], "calls": [{"tool", "listed", "isError",
     "result", "text"}], "delete": [HTTP status of each DELETE /mcp], "warnings": [SDK log lines
     at WARNING or above], "error": null | "<what broke>"}

Usage: python mcp-python-client.py URL TOKEN CALLS_JSON
where CALLS_JSON is a list of {"tool": name, "arguments": {...}}. Exit 0 whenever the JSON was
printed (the step judges it); 2 on bad usage.
"""

import asyncio
import importlib.metadata
import json
import logging
import sys


class Collect(logging.Handler):
    """Keeps the SDK's warnings: a failed session end is only logged ("Session termination failed")."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")


async def run(url, token, calls, out):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def on_response(response):
        if response.request.method == "DELETE":
            out["delete"].append(response.status_code)

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    hooks = dict(client.event_hooks)
    hooks["response"] = [*hooks.get("response", []), on_response]
    client.event_hooks = hooks
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                names = [t.name for t in listed.tools]
                out["listed"] = names
                for call in calls:
                    tool = call["tool"]
                    entry = {"tool": tool, "listed": tool in names}
                    out["calls"].append(entry)
                    if not entry["listed"]:
                        continue
                    result = await session.call_tool(tool, call.get("arguments") or {})
                    entry["isError"] = bool(result.is_error)
                    entry["result"] = result.structured_content
                    entry["text"] = "\n".join(
                        c.text for c in result.content if getattr(c, "type", None) == "text"
                    )
    # Leaving the transport's context sent DELETE /mcp (terminate_on_close).


def describe(e):
    """An exception as one line; a task group's sub-exceptions spelled out (anyio wraps them)."""
    subs = getattr(e, "exceptions", None)
    if subs:
        return "; ".join(describe(x) for x in subs)
    return f"{type(e).__name__}: {e}"


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, token, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    collect = Collect()
    logging.getLogger().addHandler(collect)
    logging.getLogger().setLevel(logging.WARNING)
    out = {"sdk": None, "listed": [], "calls": [], "delete": [], "warnings": collect.lines, "error": None}
    try:
        out["sdk"] = importlib.metadata.version("mcp")
        asyncio.run(run(url, token, calls, out))
    except BaseException as e:  # noqa: BLE001 — every failure is reported to the step, as JSON
        out["error"] = describe(e)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
