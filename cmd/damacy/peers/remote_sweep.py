#!/usr/bin/env python3
"""Sweep damacy's object-store reads against MinIO on one host: where the
limit is, and how throughput holds over a far link.

    python3 cmd/damacy/peers/remote_sweep.py --bins .gpu-remote --work /tmp/sweep
        [--out DIR] [--server-cpus 16-31] [--client-cpus 0-15]
        [--scenario throughput] [--set run.batches=60 ...] [flags]

One call, on a host with python3 and what `make remote-bins` puts in --bins
(damacy, getload, minio and nvCOMP; compressed ones are unpacked into
WORK/bin; nvCOMP, when there, becomes DAMACY_NVCOMP):

  1. starts MinIO on 127.0.0.1 pinned to --server-cpus (everything else runs
     on --client-cpus), and `damacy gen --local` uploads the scenario's
     dataset (the scenario with the --set overrides, written to WORK);
  2. local: the same scenario from the local files (no ceilings), for
     reference; runs: `damacy bench --data s3://...` at each --concurrency (GETs in
     flight; ceilings on, so each also measures the GET replay of its
     ranges through damacy's client), the first writing the GET list
     (--gets-out) and the one at --profile-concurrency a CPU profile;
  3. getload: the same GETs through minio-go at each --concurrency (MinIO's
     GET ceiling from another client stack); floor: the same GETs over
     plain TCP, no HTTP, from getload --serve-raw on --server-cpus, without
     and with SO_RCVLOWAT (what the kernel alone costs a client per GB);
  4. coalesce: for each GAP/SPAN of --coalesce, a run with larger merged
     GETs (--remote-gap, --remote-span) and getload on its GET list;
  5. loaders: --loaders runs at once without ceilings, one per GPU (round
     robin over the GPUs there are; the host engine without one), each on
     its share of --client-cpus and its own box seed;
  6. link: a run through a shaped link (damacy bench --link RTT,RATE) for
     each of --rtts at --link-rate and --link-concurrency, for --link-time.

MinIO's CPU is sampled every 0.1 s and charged to each measurement by its
own time window (the runs' measured batches, the GET replays, getload's
points). Everything lands in --out: sweep.json, sweep.md (the tables), the
bench and getload reports and the profiles; WORK keeps the data. A part
that would start after --budget seconds is skipped and said so. Only the
Python standard library is used.
"""

import argparse
import glob
import gzip
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from remote_compare import MinIO  # noqa: E402
import sweep_report  # noqa: E402

PARTS = ("local", "runs", "getload", "floor", "coalesce", "loaders", "link")


def log(msg):
    print("remote_sweep: " + msg, file=sys.stderr, flush=True)


def cpu_list(s):
    """Parse a CPU list such as 0-15,32-47."""
    out = []
    for part in s.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    if not out:
        raise argparse.ArgumentTypeError("empty CPU list %r" % s)
    return sorted(set(out))


class Sweep:
    def __init__(self, args):
        self.a = args
        self.t0 = time.time()
        self.work = os.path.abspath(args.work)
        self.out = os.path.abspath(args.out or os.environ.get("OUT") or os.path.join(self.work, "out"))
        os.makedirs(self.out, exist_ok=True)
        self.res = {
            "args": vars(args),
            "skipped": [],
            "local": None,
            "runs": [],
            "getload": [],
            "floor": [],
            "coalesce": [],
            "loaders": None,
            "link": [],
        }
        self.uri = "s3://damacy/sweep"

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def o(self, name):
        return os.path.join(self.out, name)

    def skip(self, what):
        if self.left() > 0:
            return False
        log("skipped (past --budget %d s): %s" % (self.a.budget, what))
        self.res["skipped"].append(what)
        return True

    def pin(self, cpus):
        return lambda: os.sched_setaffinity(0, cpus)

    def run(self, cmd, out=None, cpus=None):
        """Run cmd on cpus (the client's), its stderr passed through; return
        its stdout, also written to out."""
        log("[%4.0f s] $ %s" % (time.time() - self.t0, " ".join(cmd)))
        t = time.time()
        p = subprocess.run(
            cmd,
            env=self.env,
            stdout=subprocess.PIPE,
            preexec_fn=self.pin(cpus or self.a.client_cpus),
            timeout=max(self.left(), 0) + 300,
        )
        if p.returncode != 0:
            raise SystemExit("remote_sweep: %s exited with status %d" % (cmd[0], p.returncode))
        log("  %.1f s" % (time.time() - t))
        if out:
            with open(out, "wb") as f:
                f.write(p.stdout)
        return p.stdout

    def bench(self, name, extra, scenario=None, cpus=None):
        cmd = (
            [self.bins["damacy"], "bench", "--json", "--data", self.uri] + extra + [scenario or self.scenario]
        )
        if self.a.engine:
            cmd[2:2] = ["--engine", self.a.engine]
        rep = json.loads(self.run(cmd, self.o("bench-%s.json" % name), cpus))
        return self.row(name, rep)

    def row(self, name, rep):
        row = sweep_report.bench_row(name, rep, self.minio_cpu)
        log(
            "  %s: %.3f GB/s of output, %.3f GB/s read, client %.1f cores, MinIO %.1f cores%s"
            % (
                name,
                row["output_gbps"],
                row["read_gbps"],
                row["cores"],
                row["minio"]["cores"],
                "; GET replay %.3f GB/s read" % row["replay"]["read_gbps"] if "replay" in row else "",
            )
        )
        return row

    def getload(self, name, gets, levels, profile=None):
        cmd = [self.bins["getload"], "--gets", gets, "--concurrency", ",".join(map(str, levels)), "--json"]
        if self.a.getload_time:
            cmd += ["--duration", "%gs" % self.a.getload_time]
        if profile:
            cmd += ["--cpuprofile", self.o(profile)]
        res = json.loads(self.run(cmd, self.o("getload-%s.json" % name)))
        for p in res["points"]:
            t0 = sweep_report.parse_time(p["start"])
            p["minio"] = self.minio_cpu.over(t0, t0 + p["wall_s"])
            p["minio"]["cpu_s_per_gb"] = p["minio"]["cpu_s"] / max(p["bytes"] / 1e9, 1e-9)
            p["list"], p["mean_get"] = name, res["mean_get_bytes"]
            log(
                "  getload %s, %d in flight: %.3f GB/s, client %.2f cores, MinIO %.1f cores"
                % (name, p["concurrency"], p["gbps"], p["cores"], p["minio"]["cores"])
            )
        return res["points"]

    def variant(self, name, edit):
        """A copy of the scenario file with edit applied to its JSON."""
        with open(self.scenario) as f:
            sc = json.load(f)
        edit(sc)
        path = os.path.join(self.work, "scenario-%s.json" % name)
        with open(path, "w") as f:
            json.dump(sc, f, indent=1)
        return path

    def unpack(self, path):
        """path itself, or path.xz or path.gz unpacked into WORK/bin."""
        if os.path.exists(path):
            return path
        for ext, opener in ((".xz", lzma.open), (".gz", gzip.open)):
            if os.path.exists(path + ext):
                os.makedirs(os.path.join(self.work, "bin"), exist_ok=True)
                dst = os.path.join(self.work, "bin", os.path.basename(path))
                with opener(path + ext, "rb") as src, open(dst, "wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
                os.chmod(dst, 0o755)
                return dst
        return path

    def setup(self):
        a = self.a
        os.makedirs(self.work, exist_ok=True)
        self.bins = {}
        for name in ("damacy", "minio", "getload"):
            path = getattr(a, name) or self.unpack(os.path.join(a.bins, name))
            if not os.path.exists(path):
                raise SystemExit(
                    "remote_sweep: no %s binary at %s (nor .xz, .gz): run `make remote-bins`" % (name, path)
                )
            self.bins[name] = os.path.abspath(path)
        if not os.environ.get("DAMACY_NVCOMP"):
            libs = sorted(glob.glob(os.path.join(a.bins, "libnvcomp.so.*")))
            libs = libs or sorted(
                glob.glob(os.path.join(HERE, "..", "..", "..", ".gpu", "nvcomp", "libnvcomp.so.*"))
            )
            if libs:
                os.environ["DAMACY_NVCOMP"] = os.path.abspath(
                    self.unpack(re.sub(r"\.(xz|gz)$", "", libs[-1]))
                )
        info = json.loads(
            subprocess.run([self.bins["damacy"], "info", "--json"], stdout=subprocess.PIPE).stdout or b"{}"
        )
        self.gpus = len(info.get("gpus") or [])
        ver = subprocess.run(
            [self.bins["minio"], "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.res["host"] = {
            "cpus": os.cpu_count(),
            "server_cpus": a.server_cpus,
            "client_cpus": a.client_cpus,
            "gpus": [g.get("name") for g in info.get("gpus") or []],
            "engine": info.get("engine"),
            "decoder": info.get("decoder"),
            "nvcomp": os.environ.get("DAMACY_NVCOMP", ""),
            "minio": ver.stdout.decode(errors="replace").splitlines()[:1],
        }
        log(
            "host: %d CPUs (MinIO on %s, clients on %s), GPUs %s, engine %s, decoder %s"
            % (
                os.cpu_count(),
                sweep_report.cpus_text(a.server_cpus),
                sweep_report.cpus_text(a.client_cpus),
                self.res["host"]["gpus"] or "none",
                info.get("engine"),
                info.get("decoder"),
            )
        )
        src = a.scenario
        if not os.path.exists(src):
            src = os.path.join(HERE, "..", "internal", "bench", "scenarios", a.scenario + ".json")
        with open(src) as f:
            sc = json.load(f)
        for kv in a.set:
            key, _, val = kv.partition("=")
            node, parts = sc, key.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            try:
                node[parts[-1]] = json.loads(val)
            except ValueError:
                node[parts[-1]] = val
        sc.get("dataset", {}).pop("dir", None)
        self.scenario = os.path.join(self.work, "scenario.json")
        with open(self.scenario, "w") as f:
            json.dump(sc, f, indent=1)
        self.res["scenario"] = sc

    def main(self):
        a = self.a
        self.setup()
        mdir = os.path.join(self.work, "minio")
        shutil.rmtree(mdir, ignore_errors=True)
        m = MinIO(self.bins["minio"], mdir, 0, self.o("minio.log"), cpus=a.server_cpus)
        self.minio_cpu = sweep_report.CPUSampler(m.cpu_seconds)
        try:
            m.make_bucket("damacy")
            self.env = m.env()
            t = time.time()
            self.run(
                [
                    self.bins["damacy"],
                    "gen",
                    "--local",
                    os.path.join(self.work, "data"),
                    self.scenario,
                    self.uri,
                ]
            )
            self.res["gen_s"] = time.time() - t
            for part in PARTS:
                if part not in a.parts:
                    continue
                if self.skip("part " + part):
                    continue
                getattr(self, "part_" + part)()
        finally:
            self.minio_cpu.stop()
            m.stop()
            self.res["elapsed_s"] = time.time() - self.t0
            with open(self.o("sweep.json"), "w") as f:
                json.dump(self.res, f, indent=1)
            with open(self.o("sweep.md"), "w") as f:
                f.write(sweep_report.markdown(self.res))
            log(
                "done in %.0f s: %s (sweep.md, sweep.json, bench-*.json, getload-*.json, *.pprof)"
                % (self.res["elapsed_s"], self.out)
            )

    def part_local(self):
        cmd = [
            self.bins["damacy"],
            "bench",
            "--json",
            "--ceilings=false",
            "--data",
            os.path.join(self.work, "data"),
            self.scenario,
        ]
        if self.a.engine:
            cmd[2:2] = ["--engine", self.a.engine]
        rep = json.loads(self.run(cmd, self.o("bench-local.json")))
        wall = rep["wall_ns"] / 1e9
        self.res["local"] = {
            "output_gbps": rep["output_gbps"],
            "read_gbps": rep["wire_gbps"],
            "cores": rep.get("cpu_ns", 0) / 1e9 / wall,
            "engine": rep["engine"],
            "decoder": rep["decoder"],
        }
        log(
            "  local files: %.3f GB/s of output, client %.1f cores"
            % (rep["output_gbps"], self.res["local"]["cores"])
        )

    def part_runs(self):
        self.gets = self.o("gets-default.json")
        for i, c in enumerate(self.a.concurrency):
            if self.skip("run at %d in flight" % c):
                continue
            extra = ["--io-concurrency", str(c)]
            if i == 0:
                extra += ["--gets-out", self.gets]
            if c == self.a.profile_concurrency:
                extra += ["--profile", self.o("profile-run-c%d.pprof" % c)]
            row = self.bench("c%d" % c, extra)
            row["concurrency"] = c
            if c == self.a.profile_concurrency:
                row["profile"] = "profile-run-c%d.pprof" % c
            self.res["runs"].append(row)

    def default_gets(self):
        """The default run's GET list, written by a run if none has been."""
        gets = getattr(self, "gets", None)
        if not gets or not os.path.exists(gets):
            self.gets = gets = self.o("gets-default.json")
            self.run(
                [
                    self.bins["damacy"],
                    "bench",
                    "--json",
                    "--ceilings=false",
                    "--gets-out",
                    gets,
                    "--data",
                    self.uri,
                    self.scenario,
                ],
                os.devnull,
            )
        return gets

    def part_getload(self):
        gets = self.default_gets()
        points = self.getload("default", gets, self.a.concurrency, "profile-getload.pprof")
        self.res["getload"] += points
        # The profile covers every point, and the warm-ups.
        self.res["getload_profile"] = {
            "profile": "profile-getload.pprof",
            "bytes_read": sum(p["bytes"] for p in points),
        }

    def part_floor(self):
        """The same GETs over plain TCP: getload --raw against getload
        --serve-raw on the server's CPUs, without and with a low-water mark
        on the reads: what the kernel alone costs the client per GB."""
        gets = self.default_gets()
        srv = subprocess.Popen(
            [self.bins["getload"], "--serve-raw", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            preexec_fn=self.pin(self.a.server_cpus),
        )
        try:
            addr = srv.stdout.readline().decode().split()[-1]
            for lowat in (0, 256 << 10):
                cmd = [self.bins["getload"], "--raw", addr, "--gets", gets, "--json", "--rcvlowat", str(lowat)]
                cmd += ["--concurrency", ",".join(map(str, self.a.concurrency))]
                if self.a.getload_time:
                    cmd += ["--duration", "%gs" % self.a.getload_time]
                res = json.loads(self.run(cmd, self.o("floor-rcvlowat%d.json" % lowat)))
                for p in res["points"]:
                    p["rcvlowat"], p["mean_get"] = lowat, res["mean_get_bytes"]
                    log(
                        "  raw TCP, %d in flight, SO_RCVLOWAT %d: %.3f GB/s, client %.2f cores (%.3f s/GB), %.0f B per read"
                        % (p["concurrency"], lowat, p["gbps"], p["cores"], p["cpu_s_per_gb"], p["read_bytes_mean"])
                    )
                    self.res["floor"].append(p)
        finally:
            srv.terminate()
            srv.wait()

    def part_coalesce(self):
        for gs in self.a.coalesce:
            gap, _, span = gs.partition("/")
            name = "gap%s-span%s" % (gap, span or "default")
            if self.skip("coalesce " + name):
                continue
            gets = self.o("gets-%s.json" % name)
            extra = [
                "--io-concurrency",
                str(self.a.coalesce_concurrency),
                "--remote-gap",
                gap,
                "--gets-out",
                gets,
            ]
            if span:
                extra += ["--remote-span", span]
            row = self.bench(name, extra)
            row["concurrency"], row["gap"], row["span"] = self.a.coalesce_concurrency, gap, span
            self.res["coalesce"].append(row)
            for p in self.getload(name, gets, [self.a.coalesce_concurrency]):
                self.res["getload"].append(p)

    def part_loaders(self):
        n, cpus = self.a.loaders, self.a.client_cpus
        per = max(len(cpus) // n, 1)
        procs = []
        for i in range(n):
            engine = self.a.engine or ("cuda:%d" % (i % self.gpus) if self.gpus else "host")
            mine = cpus if self.a.loaders_share_cpus else cpus[i * per : (i + 1) * per] or cpus[-per:]
            path = self.variant(
                "loader%d" % i, lambda sc: sc["run"].update(seed=sc["run"].get("seed", 1) + 1000 * (i + 1))
            )
            cmd = [
                self.bins["damacy"],
                "bench",
                "--json",
                "--ceilings=false",
                "--engine",
                engine,
                "--data",
                self.uri,
                path,
            ]
            log("$ %s   (on CPUs %s)" % (" ".join(cmd), sweep_report.cpus_text(mine)))
            out = open(self.o("bench-loader%d.json" % i), "wb")
            procs.append(
                (
                    engine,
                    mine,
                    out,
                    subprocess.Popen(cmd, env=self.env, stdout=out, preexec_fn=self.pin(mine)),
                )
            )
        rows = []
        for i, (engine, mine, out, p) in enumerate(procs):
            if p.wait() != 0:
                raise SystemExit("remote_sweep: loader %d exited with status %d" % (i, p.returncode))
            out.close()
            with open(self.o("bench-loader%d.json" % i)) as f:
                row = self.row("loader%d" % i, json.load(f))
            row["cpus"] = sweep_report.cpus_text(mine)
            rows.append(row)
        first, last = min(r["start"] for r in rows), max(r["start"] + r["wall_s"] for r in rows)
        all_on = (max(r["start"] for r in rows), min(r["start"] + r["wall_s"] for r in rows))
        self.res["loaders"] = {
            "each": rows,
            "gpus": self.gpus,
            "sum_output_gbps": sum(r["output_gbps"] for r in rows),
            "sum_read_gbps": sum(r["read_gbps"] for r in rows),
            "window_s": last - first,
            "overlap_s": max(all_on[1] - all_on[0], 0),
            "minio": self.minio_cpu.over(first, last),
            "minio_all_on": self.minio_cpu.over(*all_on) if all_on[1] > all_on[0] else None,
        }

    def part_link(self):
        path = self.variant("link", lambda sc: sc["run"].update(warmup=self.a.link_warmup))
        for rtt in self.a.rtts:
            for c in self.a.link_concurrency:
                name = "link-%s-c%d" % (rtt, c)
                if self.skip(name):
                    continue
                row = self.bench(
                    name,
                    [
                        "--ceilings=false",
                        "--io-concurrency",
                        str(c),
                        "--link",
                        "%s,%s" % (rtt, self.a.link_rate),
                        "--duration",
                        "%gs" % self.a.link_time,
                    ],
                    path,
                )
                row["rtt"], row["rate"], row["concurrency"] = rtt, self.a.link_rate, c
                self.res["link"].append(row)


def main():
    ap = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    all_cpus = sorted(os.sched_getaffinity(0))
    half = max(len(all_cpus) // 2, 1)
    ap.add_argument("--bins", default=".gpu-remote", help="where damacy, getload and minio (or NAME.gz) are")
    ap.add_argument("--damacy", help="the damacy binary (default BINS/damacy)")
    ap.add_argument("--minio", help="the MinIO binary (default BINS/minio)")
    ap.add_argument("--getload", help="the getload binary (default BINS/getload)")
    ap.add_argument("--work", default="remote-sweep", help="MinIO's data, the local dataset, scenario copies")
    ap.add_argument("--out", help="the results (default $OUT, else WORK/out)")
    ap.add_argument(
        "--server-cpus",
        type=cpu_list,
        default=all_cpus[half:] or all_cpus,
        help="MinIO's CPUs (default the upper half)",
    )
    ap.add_argument(
        "--client-cpus", type=cpu_list, default=all_cpus[:half], help="the clients' CPUs (the lower half)"
    )
    ap.add_argument("--scenario", default="throughput", help="a built-in scenario's name or a scenario file")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field (JSON value): run.batches=40, dataset.arrays=4",
    )
    ap.add_argument("--engine", help="damacy bench --engine for the runs (default the scenario's)")
    ap.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS), help="of " + ",".join(PARTS))
    ap.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[32, 64, 128, 256],
        help="GETs in flight of the runs and getload",
    )
    ap.add_argument("--profile-concurrency", type=int, default=64, help="the run that writes a CPU profile")
    ap.add_argument(
        "--getload-time", type=float, default=8, help="seconds at most per getload point (0: whole list)"
    )
    ap.add_argument(
        "--coalesce",
        type=lambda s: s.split(","),
        default=["1MiB/8MiB", "4MiB/16MiB"],
        help="GAP/SPAN of the larger merged GETs",
    )
    ap.add_argument("--coalesce-concurrency", type=int, default=64)
    ap.add_argument("--loaders", type=int, default=4, help="loaders at once (one per GPU, round robin)")
    ap.add_argument("--loaders-share-cpus", action="store_true", help="every loader on all client CPUs")
    ap.add_argument("--rtts", type=lambda s: s.split(","), default=["1ms", "10ms", "50ms"])
    ap.add_argument("--link-rate", default="10Gbit", help="the shaped link's bandwidth each way")
    ap.add_argument(
        "--link-concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[64],
        help="GETs in flight over the link (64: the default IOConcurrency)",
    )
    ap.add_argument("--link-time", type=float, default=10, help="seconds of measured batches per link run")
    ap.add_argument("--link-warmup", type=int, default=2, help="warm-up batches of the link runs")
    ap.add_argument("--budget", type=float, default=480, help="seconds after which no further point starts")
    a = ap.parse_args()
    for p in a.parts:
        if p not in PARTS:
            ap.error("--parts: %r is not one of %s" % (p, ",".join(PARTS)))
    if set(a.server_cpus) & set(a.client_cpus):
        log(
            "warning: the server's and the clients' CPUs overlap: %s"
            % sweep_report.cpus_text(sorted(set(a.server_cpus) & set(a.client_cpus)))
        )
    Sweep(a).main()


if __name__ == "__main__":
    main()
