"""Python's side of the Node matrix test (test/matrix.test.js): runs the operations given
as JSON in argv[1] with the mappedcache package and prints their results as JSON.

Each operation: {"path", "do": get|set|incr|ttl, "key", "value", "ttl", "open": {...}}.
Values cross as {"t": "bytes", "v": base64} | {"t": "str", "v": text} |
{"t": "int", "v": decimal} | {"t": "float", "v": number}, and what Python reads of the Node
addon's JSON values (J) as {"t": "json", "v": json.dumps(value)}; a miss is null."""

import base64
import json
import sys

import mappedcache


def encode(v):
    if v is None:
        return None
    if isinstance(v, bytes):
        return {"t": "bytes", "v": base64.b64encode(v).decode()}
    if isinstance(v, str):
        return {"t": "str", "v": v}
    if isinstance(v, (bool, list, dict)):
        return {"t": "json", "v": json.dumps(v)}
    if isinstance(v, int):
        return {"t": "int", "v": str(v)}
    if isinstance(v, float):
        return {"t": "float", "v": v}
    return {"t": type(v).__name__, "v": repr(v)}


def decode(v):
    return {
        "bytes": lambda x: base64.b64decode(x),
        "str": lambda x: x,
        "int": int,
        "float": float,
    }[v["t"]](v["v"])


def run(op):
    cache = mappedcache.Cache(op["path"], **op.get("open", {}))
    try:
        if op["do"] == "get":
            return encode(cache.get(op["key"]))
        if op["do"] == "set":
            cache.set(op["key"], decode(op["value"]), op.get("ttl"))
            return None
        if op["do"] == "incr":
            return cache.incr(op["key"], op.get("delta", 1))
        if op["do"] == "ttl":
            return cache.ttl(op["key"])
        raise ValueError(op["do"])
    except Exception as e:  # reported, not raised: the matrix shows each cell's outcome
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        cache.close()


print(json.dumps([run(op) for op in json.loads(sys.argv[1])]))
