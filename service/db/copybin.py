"""PostgreSQL binary COPY rows for the samples table, built with numpy (no per-row Python).

A row is ``int16 nfields`` then, per field, ``int32 length`` and the big-endian value; length -1 is
NULL. Rows with and without a rate have two fixed layouts, so each is one numpy structured array.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
TRAILER = (-1).to_bytes(2, "big", signed=True)
PG_EPOCH = 946_684_800.0  # 2000-01-01T00:00:00Z, PostgreSQL's timestamp zero

_WITH_RATE = np.dtype([("n", ">i2"), ("l_ts", ">i4"), ("ts", ">i8"), ("l_sid", ">i4"), ("sid", ">i4"),
                       ("l_val", ">i4"), ("val", ">f8"), ("l_rate", ">i4"), ("rate", ">f8")])
_NO_RATE = np.dtype([("n", ">i2"), ("l_ts", ">i4"), ("ts", ">i8"), ("l_sid", ">i4"), ("sid", ">i4"),
                     ("l_val", ">i4"), ("val", ">f8"), ("l_rate", ">i4")])


def _fill(dtype: np.dtype, ts_us: npt.NDArray[np.int64], sid: npt.NDArray[np.int64],
          val: npt.NDArray[np.float64]) -> npt.NDArray[np.void]:
    a = np.empty(len(ts_us), dtype=dtype)
    a["n"] = 4
    a["l_ts"] = 8
    a["ts"] = ts_us
    a["l_sid"] = 4
    a["sid"] = sid
    a["l_val"] = 8
    a["val"] = val
    return a


def stored_us(ts: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Epoch seconds as `samples.ts` stores them: microseconds from 2000-01-01, rounded."""
    return np.rint((ts - PG_EPOCH) * 1e6).astype(np.int64)


def samples_copy_payload(ts: npt.NDArray[np.float64], series_id: npt.NDArray[np.int64],
                         value: npt.NDArray[np.float64], rate: npt.NDArray[np.float64]) -> bytes:
    """Binary COPY payload for ``COPY samples (ts, series_id, value, rate)``; NaN rate = NULL."""
    ts_us = stored_us(ts)
    has = ~np.isnan(rate)
    with_rate = _fill(_WITH_RATE, ts_us[has], series_id[has], value[has])
    with_rate["l_rate"] = 8
    with_rate["rate"] = rate[has]
    no_rate = _fill(_NO_RATE, ts_us[~has], series_id[~has], value[~has])
    no_rate["l_rate"] = -1
    return b"".join((HEADER, with_rate.tobytes(), no_rate.tobytes(), TRAILER))


def iso_utc(ts: npt.NDArray[np.float64]) -> list[str]:
    """Epoch seconds → ISO timestamps with offset, vectorized, for text COPY of other tables."""
    us = np.rint(np.asarray(ts, dtype=np.float64) * 1e6).astype("datetime64[us]")
    return [s + "+00" for s in np.datetime_as_string(us).tolist()]
