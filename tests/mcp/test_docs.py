"""The MCP client configurations the docs show name a command line ``svit`` accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from svit.cli import build_parser, cmd_mcp

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("document", ["README.md", "docs/mcp.md"])
def test_the_documented_configuration_runs_svit_mcp(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    configurations = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S) if "mcpServers" in block]
    assert configurations, f"{document} shows an MCP client configuration"
    for configuration in configurations:
        server = configuration["mcpServers"]["svit"]
        assert server["command"] == "svit"
        args = build_parser().parse_args(server["args"])
        assert args.run is cmd_mcp and args.address == "svit://local/me/notes" and args.create
