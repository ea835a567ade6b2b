"""The published leaderboard: results files, their schema, and the static site rendered from them.

``leaderboard.schema``  the JSON Lines results format (schema version, validator)
``leaderboard.export``  store -> new append-only results files
``leaderboard.board``   results records -> the numbers every page shows
``leaderboard.svg``     hand-drawn SVG curves, the colour of each encoding
``leaderboard.site``    the static site (HTML + inline CSS/JS) and leaderboard/README.md
``leaderboard.cli``     ``pezoo leaderboard export | check | build``

Depends on ``harness`` (store, report, task registry) and ``pezoo``; neither imports it
(``harness/cli.py``, the composition root, attaches the command group).
"""
