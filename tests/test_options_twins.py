"""Every keyword-argument TypedDict says exactly what the options type it spells out says.

The TypedDicts type ``**settings`` (``TGBDataset(**ReadSettings)``, ``write_dataset(**WriteSettings)``,
``produce_on_ray(**FleetSettings)``); their options types are the one definition. A field added, renamed
or retyped on one side and not the other fails here, naming it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ForwardRef

import pytest

from torch_tgb.consumer.options import ReaderOptions, ReadSettings
from torch_tgb.datapipes.produce.batches import Batching, BatchingSettings
from torch_tgb.offline.dataset import WriteSettings
from torch_tgb.producer.options import ProduceOptions, ProduceSettings


def _text(annotation: Any) -> str:
    if isinstance(annotation, ForwardRef):
        return annotation.__forward_arg__
    return annotation if isinstance(annotation, str) else repr(annotation)


def _typed_dict(td: type) -> dict[str, str]:
    fields: dict[str, str] = {}
    for base in reversed(td.__mro__):
        fields.update({k: _text(v) for k, v in getattr(base, "__annotations__", {}).items()})
    return fields


def _dataclass(*types: type) -> dict[str, str]:
    return {f.name: _text(f.type) for t in types for f in dataclasses.fields(t)}


@pytest.mark.parametrize(("settings", "options"), [
    (ReadSettings, (ReaderOptions,)),
    (ProduceSettings, (ProduceOptions,)),
    (BatchingSettings, (Batching,)),
    (WriteSettings, (Batching, ProduceOptions)),
], ids=lambda x: getattr(x, "__name__", ""))
def test_settings_spell_their_options_exactly(settings: type, options: tuple[type, ...]) -> None:
    assert _typed_dict(settings) == _dataclass(*options)


def test_fleet_settings_are_the_fleet_keywords() -> None:
    pytest.importorskip("ray")
    from torch_tgb.integrations.ray import Fleet, FleetSettings

    params = inspect.signature(Fleet.__init__).parameters
    keywords = {n: _text(p.annotation) for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    fleet = {k: v.removeprefix("Required[").removesuffix("]") if v.startswith("Required[") else v
             for k, v in _typed_dict(FleetSettings).items() if k not in _dataclass(ProduceOptions)}
    assert fleet == keywords
