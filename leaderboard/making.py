"""How a row's runs were made: on what kind of device, with exact match computed how, and
with float32 matrix products in TF32 or not.

A record's provenance says it: ``device`` (``cpu:x86_64 x1 threads``, ``cuda:NVIDIA H200``),
and since 27 November 2026 ``exact_match_by`` (``greedy decode``, ``teacher-forced
read-off``, ``one encoder pass``) and ``tf32`` (``on``/``off``), written by
``harness.execution.run.how_made``. A record without the last two predates them and was
decoded, without TF32 (docs/leaderboard.md): a decoder's exact match by greedy decode, an
encoder's by its one pass.

A GPU run and a CPU run of one config share a run id (the device is provenance, not
config) but are made differently: on CUDA exact match is read off the teacher-forced pass
and matrix products run in TF32. The board never pools them silently (:data:`MADE_RULE`):

* a **row** is made one way: ``leaderboard.records.check_protocols`` (so ``check``,
  ``build`` and ``export``) refuses a row whose runs differ in the kind of device, in how
  exact match was computed or in TF32, as it refuses a table whose runs differ in
  protocol; CPUs of other models or thread counts, and GPUs of other cards, are one kind;
* a **table** may hold rows made in different ways (a row trained on a GPU beside rows
  trained on CPUs), and every row not made the plain way (a CPU, exact match by decode or
  an encoder's pass, no TF32) carries a mark (:attr:`Making.mark`: ``GPU``) whose legend
  under the table (:func:`legend`) names the card, how exact match was computed and TF32.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leaderboard.text import and_join

DEVICE_KINDS = {"cpu": "CPU", "cuda": "GPU", "mps": "Apple GPU"}
"""A device string's prefix (before ``:``) -> the kind of device the pages name."""

GREEDY, READ_OFF, ENCODER_PASS = "greedy decode", "teacher-forced read-off", "one encoder pass"
PLAIN_EXACT_MATCH = (GREEDY, ENCODER_PASS)
"""How a CPU run computes exact match without the GPU loop's features: the unmarked way."""

ONE_WAY = (
    "A row's runs are made one way: on one kind of device (CPU or GPU), with exact match computed one way "
    "(greedy decode, or read off the teacher-forced pass) and TF32 on or off for all of them, so its seeds' spread "
    "is what the seeds did"
)
MADE_RULE = (
    f"{ONE_WAY}; `pezoo leaderboard check` refuses a row that mixes them, as it refuses a table that mixes "
    "protocols. Rows made otherwise than on a CPU with exact match by decode may share a table with the others and "
    "are marked."
)
"""The board's rule for runs made on different devices, quoted by the docs and the legends."""

READ_OFF_NOTE = (
    "exact match read off the teacher-forced pass counts an example right when every token of its answer, EOS "
    "included, is the most likely one given the true tokens before it: the greedy decode's count, up to the "
    "arithmetic's rounding"
)
"""What a read-off exact match is, where a legend names one."""


@dataclass(frozen=True)
class Making:
    """How one row's runs were made.

    Attributes:
        kind: ``CPU``, ``GPU`` (CUDA), ``Apple GPU`` (MPS), or the device string's prefix.
        exact_match_by: ``greedy decode``, ``teacher-forced read-off`` or ``one encoder pass``.
        tf32: ``on`` when float32 matrix products ran on TF32 tensor cores, else ``off``.
        devices: the runs' device strings, each once, sorted (``cuda:NVIDIA H200``).
    """

    kind: str
    exact_match_by: str
    tf32: str
    devices: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        """What must be one within a row: kind, exact match's method, TF32 (not the card or CPU model)."""
        return (self.kind, self.exact_match_by, self.tf32)

    @property
    def plain(self) -> bool:
        """Made as the CPU board is: on a CPU, exact match by decode (or an encoder's pass), no TF32."""
        return self.kind == "CPU" and self.exact_match_by in PLAIN_EXACT_MATCH and self.tf32 == "off"

    @property
    def mark(self) -> str:
        """The row's mark where it is not :attr:`plain` (``GPU``), else ``""``."""
        if self.plain:
            return ""
        return self.kind if self.kind != "CPU" else f"EM by {self.exact_match_by}"

    @property
    def cards(self) -> tuple[str, ...]:
        """The devices' names after the kind (``NVIDIA H200``), each once; none on a CPU."""
        if self.kind == "CPU":
            return ()
        return tuple(dict.fromkeys(name for d in self.devices if (name := d.partition(":")[2])))

    def sentence(self) -> str:
        """``on a GPU (NVIDIA H200), exact match by teacher-forced read-off, float32 matrix
        products in TF32`` or ``on a CPU, exact match by greedy decode, TF32 off``."""
        device = f"on {'an' if self.kind[:1] in 'AEIOU' else 'a'} {self.kind}"
        if self.cards:
            device += f" ({', '.join(self.cards)})"
        tf32 = "float32 matrix products in TF32" if self.tf32 == "on" else f"TF32 {self.tf32}"
        return f"{device}, exact match by {self.exact_match_by}, {tf32}"


def making_of(data: Mapping[str, Any]) -> Making:
    """How the run of one record (its data) was made, with the defaults of the records
    that predate ``exact_match_by`` and ``tf32`` (decoded, or one encoder pass; TF32 off)."""
    prov = data.get("provenance") or {}
    device = str(prov.get("device", ""))
    prefix = device.partition(":")[0]
    kind = DEVICE_KINDS.get(prefix, prefix or "unrecorded device")
    encoder = (data.get("config") or {}).get("protocol") == "encoder"
    by = str(prov.get("exact_match_by", ENCODER_PASS if encoder else GREEDY))
    return Making(kind, by, str(prov.get("tf32", "off")), (device,))


def making_of_runs(datas: Iterable[Mapping[str, Any]]) -> Making:
    """The one way the runs of a row (their records' data) were made, their devices
    together; ValueError where they were made in more than one (``check_protocols``
    refuses such a row before a board is assembled)."""
    found = [making_of(d) for d in datas]
    keys = {m.key for m in found}
    if len(keys) != 1:
        raise ValueError(f"runs made {len(keys)} ways: {', '.join(sorted(map(str, keys)))}")
    first = found[0]
    return Making(first.kind, first.exact_match_by, first.tf32, tuple(sorted({d for m in found for d in m.devices})))


def legend(rows: Sequence[tuple[str, Making | None]]) -> str | None:
    """The key to a table's marks: per way of making that is not plain, its mark, how it
    was made and its rows; then how the other rows were made; then what a read-off exact
    match is, where one is named. None where every row was made the plain way."""
    marked: dict[tuple[str, str, str], list[tuple[str, Making]]] = {}
    plain: list[Making] = []
    for label, making in rows:
        if making is None:
            continue
        if making.plain:
            plain.append(making)
        else:
            marked.setdefault(making.key, []).append((label, making))
    if not marked:
        return None
    parts = []
    for group in marked.values():
        devices = tuple(sorted({d for _, m in group for d in m.devices}))
        first = group[0][1]
        made = Making(first.kind, first.exact_match_by, first.tf32, devices)
        labels = and_join([label for label, _ in group])
        parts.append(f"{made.mark}: trained and evaluated {made.sentence()} ({labels})")
    text = "; ".join(parts)
    if plain:
        ways = sorted({m.exact_match_by for m in plain})
        text += f"; every other row on a CPU, exact match by {' or '.join(ways)}, TF32 off"
    if any(key[1] == READ_OFF for key in marked):
        text += f". An {READ_OFF_NOTE}"
    return text
