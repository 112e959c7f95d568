"""Reading remote_sweep.py's measurements, and writing its tables. Run as
a script, `python3 cmd/damacy/peers/sweep_report.py OUT/sweep.json` prints
the tables of a sweep again.
"""

import datetime
import json
import re
import sys
import threading
import time


def parse_time(s):
    """A Go time (RFC 3339 with up to nanoseconds) as seconds since the epoch."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("not a time: %r" % s)
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    t = datetime.datetime.fromisoformat(m.group(1) + tz).timestamp()
    return t + float("0." + (m.group(2) or "0"))


class CPUSampler:
    """Samples a process's CPU time every 0.1 s, to charge it to windows."""

    def __init__(self, read):
        self.read, self.samples, self.stop_ = read, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_.is_set():
            try:
                self.samples.append((time.time(), self.read()))
            except OSError:
                return
            self.stop_.wait(0.1)

    def at(self, t):
        s = self.samples
        if not s:
            return 0.0
        for i in range(1, len(s)):
            if s[i][0] >= t:
                (t0, c0), (t1, c1) = s[i - 1], s[i]
                return c0 + (c1 - c0) * (t - t0) / max(t1 - t0, 1e-9) if t > t0 else c0
        return s[-1][1]

    def over(self, t0, t1):
        """CPU seconds between t0 and t1, and as cores."""
        cpu = max(self.at(t1) - self.at(t0), 0.0)
        return {"cpu_s": cpu, "cores": cpu / max(t1 - t0, 1e-9)}

    def stop(self):
        self.stop_.set()
        self.thread.join()


def bench_row(name, rep, cpu):
    """The figures of one damacy bench report, with the server's CPU (a
    CPUSampler) over its windows: the measured batches, the GET replay."""
    c = rep["stats"]["counters"]
    wall = rep["wall_ns"] / 1e9
    start = parse_time(rep["measured_start"])
    row = {
        "name": name,
        "report": "bench-%s.json" % name,
        "output_gbps": rep["output_gbps"],
        "read_gbps": rep["wire_gbps"],
        "read_amp": rep["read_amplification"],
        "wall_s": wall,
        "start": start,
        "cores": rep.get("cpu_ns", 0) / 1e9 / wall,
        "cpu_s_per_gb": rep.get("cpu_ns", 0) / 1e9 / max(c["bytes_read"] / 1e9, 1e-9),
        "gets": c.get("remote_requests", 0),
        "retries": c.get("remote_retries", 0),
        "bytes_read": c["bytes_read"],
        "mean_get": c["bytes_read"] / max(c.get("read_ops", 1), 1),
        "engine": rep["engine"],
        "decoder": rep["decoder"],
        "device": rep["device"],
        "data": rep.get("data_source"),
        "link": rep.get("link"),
        "minio": cpu.over(start, start + wall),
    }
    row["minio"]["cpu_s_per_gb"] = row["minio"]["cpu_s"] / max(c["bytes_read"] / 1e9, 1e-9)
    for cl in rep.get("ceilings") or []:
        if cl["name"] == "GET replay":
            t0 = parse_time(cl["start"])
            t = cl["time_ns"] / 1e9
            row["replay"] = {
                "read_gbps": cl["gbps"],
                "output_gbps": cl["output_gbps"],
                "detail": cl["detail"],
                "cores": cl.get("cpu_ns", 0) / 1e9 / t,
                "cpu_s_per_gb": cl.get("cpu_ns", 0) / 1e9 / max(cl["bytes"] / 1e9, 1e-9),
                "minio": cpu.over(t0, t0 + t),
            }
            row["replay"]["minio"]["cpu_s_per_gb"] = row["replay"]["minio"]["cpu_s"] / max(
                cl["bytes"] / 1e9, 1e-9
            )
    return row


def _f(x, fmt="%.2f"):
    return "-" if x is None else fmt % x


def _bytes(n):
    for unit, d in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= d:
            return "%.1f %s" % (n / d, unit) if unit != "GB" else "%.2f GB" % (n / d)
    return "%d B" % n


def _ibytes(n):
    """A merge setting in binary units, as given: 256 KiB, 8 MiB."""
    for unit, d in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= d and n % (d // 4) == 0:
            return ("%g " % (n / d)) + unit
    return "%d B" % n


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _replay_for(res, point):
    """The run whose GET replay issued the same GETs as a getload point."""
    rows = (
        res["runs"]
        if point["list"] == "default"
        else [r for r in res["coalesce"] if r["name"] == point["list"]]
    )
    for r in rows:
        if r.get("concurrency") == point["concurrency"] and "replay" in r:
            return r
    return None


def _getload_for(res, run, name):
    for p in res["getload"]:
        if p["list"] == name and p["concurrency"] == run.get("concurrency"):
            return p
    return None


def markdown(res):
    h, sc = res.get("host", {}), res.get("scenario", {})
    ds, rn = sc.get("dataset", {}), sc.get("run", {})
    md = ["# remote_sweep results\n"]
    md.append(
        "- host: %s CPUs; MinIO pinned to %s, the clients to %s; GPUs: %s; engine %s, decoder %s\n"
        % (
            h.get("cpus"),
            cpus_text(h.get("server_cpus")),
            cpus_text(h.get("client_cpus")),
            ", ".join(h.get("gpus") or []) or "none",
            h.get("engine"),
            h.get("decoder"),
        )
    )
    md.append("- MinIO: %s\n" % " ".join(h.get("minio") or []))
    md.append(
        "- scenario %s: %s arrays of %s %s, chunks %s in shards %s, %s; %s x %s boxes per batch, %s batches "
        "after %s warm-up; generated and uploaded in %s s; the sweep took %.0f s\n"
        % (
            sc.get("name"),
            ds.get("arrays"),
            ds.get("shape"),
            ds.get("dtype"),
            ds.get("chunk"),
            ds.get("shard"),
            ds.get("codec"),
            rn.get("config", rn).get("batch_size"),
            rn.get("config", rn).get("sample_shape"),
            rn.get("batches"),
            rn.get("warmup"),
            _f(res.get("gen_s"), "%.0f"),
            res.get("elapsed_s", 0),
        )
    )
    if res.get("skipped"):
        md.append("- skipped (past --budget): %s\n" % "; ".join(res["skipped"]))

    md.append(
        "\n## MinIO's GET ceiling: the same GETs through minio-go (getload) and damacy's client (GET replay)\n\n"
    )
    rows = []
    for p in res.get("getload", []):
        r = _replay_for(res, p)
        rp = r["replay"] if r else None
        rows.append(
            [
                p["list"],
                _bytes(p["mean_get"]),
                p["concurrency"],
                "**%.2f**" % p["gbps"],
                "%.0f" % p["gets_per_s"],
                "%.2f (%.2f)" % (p["cores"], p["cpu_s_per_gb"]),
                "%.1f (%.2f)" % (p["minio"]["cores"], p["minio"]["cpu_s_per_gb"]),
                "%.1f / %.1f" % (p["p50_ms"], p["p99_ms"]),
                "" if p["complete"] else "cut at %.0f s" % p["wall_s"],
                _f(rp and rp["read_gbps"]),
                rp and "%.2f (%.2f)" % (rp["cores"], rp["cpu_s_per_gb"]) or "-",
                rp and "%.1f (%.2f)" % (rp["minio"]["cores"], rp["minio"]["cpu_s_per_gb"]) or "-",
            ]
        )
    md.append(
        _table(
            [
                "GET list",
                "mean GET",
                "in flight",
                "getload GB/s",
                "GETs/s",
                "getload cores (CPU s/GB)",
                "MinIO cores (CPU s/GB)",
                "GET p50 / p99 ms",
                "note",
                "damacy replay GB/s",
                "replay client cores (s/GB)",
                "MinIO cores in replay (s/GB)",
            ],
            rows,
        )
    )

    if res.get("floor"):
        md.append(
            "\n## The floor: the same GETs over plain TCP (getload --raw; no HTTP, the server on MinIO's CPUs)\n\n"
        )
        rows = [
            [
                _bytes(p["mean_get"]),
                p["concurrency"],
                p["rcvlowat"] and _ibytes(p["rcvlowat"]) or "-",
                "%.2f" % p["gbps"],
                "**%.2f** (%.3f)" % (p["cores"], p["cpu_s_per_gb"]),
                _bytes(p["read_bytes_mean"]),
                "%.1f / %.1f" % (p["p50_ms"], p["p99_ms"]),
            ]
            for p in res["floor"]
        ]
        md.append(
            _table(
                ["mean GET", "in flight", "SO_RCVLOWAT", "GB/s", "client cores (CPU s/GB)", "per read", "p50 / p99 ms"],
                rows,
            )
        )

    md.append("\n## damacy bench over s3:// (measured batches)\n\n")
    lc = res.get("local")
    if lc:
        md.append(
            "From the local files, the same boxes: **%.2f** GB/s of output (%.2f read) on %.1f cores (%s / %s).\n\n"
            % (lc["output_gbps"], lc["read_gbps"], lc["cores"], lc["engine"], lc["decoder"])
        )
    md.append(
        "Client cores are the whole process's (decoding and assembly included); the GET replay's, above, are "
        "its requests' alone.\n\n"
    )
    rows = []
    for r in res.get("runs", []) + res.get("coalesce", []):
        lst = "default" if r in res.get("runs", []) else r["name"]
        g = _getload_for(res, r, lst)
        d = r.get("data") or {}
        rows.append(
            [
                r["name"],
                r.get("concurrency"),
                "%s / %s" % (_ibytes(d.get("gap_bytes", 0)), _ibytes(d.get("span_bytes", 0))),
                "**%.2f**" % r["output_gbps"],
                "%.2f" % r["read_gbps"],
                "%.2f" % r["read_amp"],
                r["gets"],
                _bytes(r["mean_get"]),
                "%.1f (%.2f)" % (r["cores"], r["cpu_s_per_gb"]),
                "%.1f (%.2f)" % (r["minio"]["cores"], r["minio"]["cpu_s_per_gb"]),
                _pct(r["read_gbps"], r.get("replay", {}).get("read_gbps")),
                _pct(r["read_gbps"], g and g["gbps"]),
                _pct(r["output_gbps"], lc and lc["output_gbps"]),
                "%s / %s" % (r["engine"], r["decoder"]),
            ]
        )
    md.append(
        _table(
            [
                "run",
                "in flight",
                "gap / span",
                "output GB/s",
                "read GB/s",
                "read amp.",
                "GETs",
                "mean GET",
                "client cores (CPU s per GB read)",
                "MinIO cores (s/GB)",
                "read / replay",
                "read / getload",
                "s3 / local",
                "engine / decoder",
            ],
            rows,
        )
    )

    for r in res.get("runs", []):
        if r.get("profile"):
            md.append(
                "\nCPU profile of the run at %d in flight (its measured batches): %s; where its time goes, "
                "with Go: `cmd/damacy/peers/profile_split.sh %s %.3f` (the GB it read).\n"
                % (r["concurrency"], r["profile"], r["profile"], r["bytes_read"] / 1e9)
            )
    gp = res.get("getload_profile")
    if gp:
        md.append(
            "\ngetload's CPU profile (all its points, the warm-ups included): `cmd/damacy/peers/profile_split.sh "
            "%s %.3f` (the GB its measured GETs read).\n" % (gp["profile"], gp["bytes_read"] / 1e9)
        )
    ld = res.get("loaders")
    if ld:
        md.append("\n## %d loaders at once on one MinIO (%d GPUs)\n\n" % (len(ld["each"]), ld["gpus"]))
        rows = [
            [
                r["name"],
                r["device"],
                r["cpus"],
                "%.2f" % r["output_gbps"],
                "%.2f" % r["read_gbps"],
                "%.1f" % r["cores"],
                "%.1f s" % r["wall_s"],
            ]
            for r in ld["each"]
        ]
        rows.append(
            ["**sum**", "", "", "**%.2f**" % ld["sum_output_gbps"], "%.2f" % ld["sum_read_gbps"], "", ""]
        )
        md.append(
            _table(["loader", "device", "CPUs", "output GB/s", "read GB/s", "client cores", "measured"], rows)
        )
        md.append(
            "\nMinIO over the %.1f s from the first start to the last end: %.1f cores; over the %.1f s all ran: %s "
            "cores.\n"
            % (
                ld["window_s"],
                ld["minio"]["cores"],
                ld["overlap_s"],
                _f(ld["minio_all_on"] and ld["minio_all_on"]["cores"], "%.1f"),
            )
        )

    if res.get("link"):
        md.append("\n## Through a shaped link (damacy bench --link; a loopback proxy)\n\n")
        rows = []
        for r in res["link"]:
            lk = r.get("link") or {}
            rows.append(
                [
                    r["rtt"],
                    r["rate"],
                    r["concurrency"],
                    "%.2f" % r["output_gbps"],
                    "%.3f" % lk.get("down_gbps", 0),
                    "**%.0f%%**" % (100 * lk.get("busy", 0)),
                    r["gets"],
                    _bytes(r["mean_get"]),
                    "%.1f" % r["cores"],
                ]
            )
        md.append(
            _table(
                [
                    "RTT",
                    "rate each way",
                    "in flight",
                    "output GB/s",
                    "link down GB/s",
                    "link busy",
                    "GETs",
                    "mean GET",
                    "client cores",
                ],
                rows,
            )
        )

    md.append("\n## Targets\n\n" + _targets(res))
    return "".join(md)


def _targets(res):
    out = []
    for r in res.get("runs", []):
        g = _getload_for(res, r, "default")
        if g:
            out.append(
                "- %d in flight: the run reads at %s of getload's rate on the same GETs (target >= 85%%, or >= 30 "
                "GB/s of output: %.2f)\n"
                % (r["concurrency"], _pct(r["read_gbps"], g["gbps"]), r["output_gbps"])
            )
        rp = r.get("replay")
        out.append(
            "- %d in flight: the client's requests cost %s CPU s per GB fetched in the GET replay (target <= 0.5); "
            "the run's whole process, decoding included, %.2f\n"
            % (r["concurrency"], _f(rp and rp["cpu_s_per_gb"]), r["cpu_s_per_gb"])
        )
    for p in res.get("floor", []):
        if not p["rcvlowat"]:
            out.append(
                "- %d in flight: over plain TCP, no HTTP, the same bytes cost the client %.2f CPU s per GB\n"
                % (p["concurrency"], p["cpu_s_per_gb"])
            )
    for r in res.get("link", []):
        if r["rtt"] == "10ms":
            out.append(
                "- 10 ms RTT, %d in flight: the link %.0f%% busy (target >= 80%%)\n"
                % (r["concurrency"], 100 * (r.get("link") or {}).get("busy", 0))
            )
    out.append("- tensorstore's s3 (target: damacy >= 3x it): measured by remote_compare.py, not here\n")
    return "".join(out)


def _pct(a, b):
    return "%.0f%%" % (100 * a / b) if a and b else "-"


def cpus_text(cpus):
    """A CPU list as ranges: 0-15,32-47."""
    if not cpus:
        return "-"
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(markdown(json.load(f)))
