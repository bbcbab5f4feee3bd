"""Canal-JSON / Simple DDL ``type`` back to a model ActionType (both decoders' inverse of `ddl_kind`)."""

from __future__ import annotations

from ..model import ActionType, classify_ddl, ddl_kind

# An ActionType standing for each event type when the SQL text does not classify as that type.
KIND_ACTION: dict[str, ActionType] = {
    "CREATE": ActionType.CREATE_TABLE,
    "RENAME": ActionType.RENAME_TABLE,
    "CINDEX": ActionType.ADD_INDEX,
    "DINDEX": ActionType.DROP_INDEX,
    "ERASE": ActionType.DROP_TABLE,
    "TRUNCATE": ActionType.TRUNCATE_TABLE,
    "ALTER": ActionType.MODIFY_COLUMN,
    "QUERY": ActionType.NONE,
}


def ddl_action(kind: str, sql: str, *, simple: bool = False) -> int:
    """The SQL's ActionType when it agrees with the producer's ``type``; else the type's stand-in.

    The kind mapping is lossy (many actions are ALTER), so the SQL refines it; the producer's
    word on the kind wins. ``kind`` must be a key of `KIND_ACTION`.
    """
    try:
        action = classify_ddl(sql)
    except Exception:  # classify_ddl is a best-effort keyword reader; the type member decides
        action = ActionType.NONE
    if ddl_kind(action, simple=simple) == kind:
        return int(action)
    return int(KIND_ACTION[kind])
