#!/usr/bin/env python3
"""Compare a scenario read from local files and from MinIO over loopback.

    python3 cmd/damacy/peers/remote_compare.py --damacy PATH --minio PATH
        [--work DIR] [--data DIR] [--engine E] [flags] SCENARIO

In one run, on one host:

  1. starts MinIO (the binary given) on 127.0.0.1 with a data directory
     under --work, and makes a bucket;
  2. `damacy gen --local DATA SCENARIO s3://BUCKET/SCENARIO`: generates the
     dataset in DATA (or takes it from there) and uploads it;
  3. `damacy bench --json --boxes-out` on DATA, then on the s3:// copy (the
     same seed draws the same boxes; the script checks that they are);
  4. tensorstore_peer.py on the same boxes through tensorstore's s3 kvstore
     against the same MinIO (unless --no-peer), and with --peer-local also
     on the local files;
  5. prints each rate as it comes, with the cores damacy kept busy over its
     measured batches and MinIO's CPU over each command, then the ratios
     s3/local and damacy/tensorstore; writes everything (the reports, the
     boxes, the costs) under --work, summed up in compare.json.

Only the Python standard library is used (the peer needs tensorstore and
numpy; torch for the GPU copy). Everything runs on loopback; MinIO is
stopped at the end and its data directory removed unless --keep.
"""

import argparse
import datetime
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REGION = "us-east-1"
HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print("remote_compare: " + msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sigv4_request(method, endpoint, path, access, secret, body=b""):
    """Send one S3 request signed with AWS Signature Version 4."""
    host = endpoint.split("://", 1)[1]
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, path, "", "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers)), signed, payload]
    )
    scope = "%s/%s/s3/aws4_request" % (day, REGION)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    data = body if method in ("PUT", "POST") else None
    req = urllib.request.Request(endpoint + path, data=data, method=method)
    for k, v in headers.items():
        if k != "host":
            req.add_header(k, v)
    req.add_header(
        "Authorization",
        "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (access, scope, signed, sig),
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class MinIO:
    """A MinIO server on 127.0.0.1 (on the CPUs cpus, when given), stopped
    by stop()."""

    def __init__(self, binary, data_dir, port, log_path, cpus=None):
        self.access = "damacybench"
        self.secret = secrets.token_hex(16)
        self.port = port or free_port()
        self.endpoint = "http://127.0.0.1:%d" % self.port
        os.makedirs(data_dir, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": data_dir,
            "MINIO_ROOT_USER": self.access,
            "MINIO_ROOT_PASSWORD": self.secret,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            # Write through the page cache (MinIO writes with O_DIRECT by
            # default), so that the copy is served warm, as the local run
            # reads its files from a warm page cache.
            "MINIO_API_ODIRECT": "off",
            "MINIO_API_DISABLE_ODIRECT": "on",
        }
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [
                binary,
                "server",
                "--quiet",
                "--address",
                "127.0.0.1:%d" % self.port,
                "--console-address",
                "127.0.0.1:%d" % free_port(),
                data_dir,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # Pinned before exec, so that every thread of the server
            # inherits the set (cpus: None for all).
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        deadline = time.time() + 90
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(
                    "remote_compare: MinIO exited at start (status %d); see %s"
                    % (self.proc.returncode, log_path)
                )
            try:
                with urllib.request.urlopen(self.endpoint + "/minio/health/live", timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.time() > deadline:
                self.stop()
                raise SystemExit("remote_compare: MinIO not live after 90 s; see %s" % log_path)
            time.sleep(0.1)

    def cpu_seconds(self):
        """The CPU time (user and system) the server has used so far."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def make_bucket(self, bucket):
        # MinIO answers its liveness check before its object layer is up,
        # and 503 until then.
        deadline = time.time() + 60
        while True:
            status, body = sigv4_request("PUT", self.endpoint, "/" + bucket, self.access, self.secret)
            if status == 200 or b"BucketAlreadyOwnedByYou" in body:
                return
            if status < 500 or time.time() > deadline:
                raise SystemExit("remote_compare: creating bucket %s: %d %s" % (bucket, status, body[:300]))
            time.sleep(0.2)

    def env(self):
        """The environment that points damacy and tensorstore at the server."""
        e = dict(os.environ)
        e.update(
            {
                "AWS_ACCESS_KEY_ID": self.access,
                "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
                "DAMACY_S3_ENDPOINT": self.endpoint,
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true",
            }
        )
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "DAMACY_S3_ANONYMOUS"):
            e.pop(k, None)
        return e

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def run(cmd, env, minio, out=None):
    """Run cmd, its stderr passed through, and return its stdout (also
    written to out) and what it cost: its wall time, its CPU time and
    MinIO's CPU time meanwhile, in seconds."""
    log("$ " + " ".join(cmd))
    t, m = time.time(), minio.cpu_seconds()
    c = os.times()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE)
    c2 = os.times()
    cost = {
        "wall_s": time.time() - t,
        "cpu_s": c2.children_user + c2.children_system - c.children_user - c.children_system,
        "minio_cpu_s": minio.cpu_seconds() - m,
    }
    if p.returncode != 0:
        raise SystemExit("remote_compare: %s exited with status %d" % (cmd[0], p.returncode))
    log("  %.1f s, CPU %.1f s, MinIO's CPU %.1f s" % (cost["wall_s"], cost["cpu_s"], cost["minio_cpu_s"]))
    if out:
        with open(out, "wb") as f:
            f.write(p.stdout)
    return p.stdout, cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", help="a scenario name or file, as damacy bench takes")
    ap.add_argument("--damacy", default=os.environ.get("DAMACY", "damacy"), help="the damacy binary")
    ap.add_argument("--minio", default=os.environ.get("DAMACY_MINIO", "minio"), help="the MinIO binary")
    ap.add_argument("--work", default="remote-compare", help="where MinIO's data, the reports and boxes go")
    ap.add_argument("--data", help="the local dataset (default: WORK/data); generated there when absent")
    ap.add_argument("--port", type=int, default=0, help="MinIO's port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--bucket", default="damacy")
    ap.add_argument("--engine", help="damacy bench --engine for both runs")
    ap.add_argument("--io-concurrency", type=int, help="damacy bench --io-concurrency for the s3 run")
    ap.add_argument("--bench-arg", action="append", default=[], help="an argument for both bench runs")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the tensorstore peer")
    ap.add_argument("--peer-threads", type=int, help="tensorstore_peer.py --threads")
    ap.add_argument("--peer-requests", type=int, help="tensorstore_peer.py --requests (in flight)")
    ap.add_argument("--no-peer", action="store_true", help="do not run tensorstore")
    ap.add_argument("--peer-local", action="store_true", help="also run tensorstore on the local files")
    ap.add_argument("--keep", action="store_true", help="keep MinIO's data directory")
    args = ap.parse_args()

    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    data = os.path.abspath(args.data or os.path.join(work, "data"))
    name = os.path.splitext(os.path.basename(args.scenario))[0]
    uri = "s3://%s/%s" % (args.bucket, name)
    minio_dir = os.path.join(work, "minio")
    if os.path.exists(minio_dir):
        shutil.rmtree(minio_dir)

    bench = [args.damacy, "bench", "--json"] + args.bench_arg
    if args.engine:
        bench += ["--engine", args.engine]

    def f(name):
        return os.path.join(work, name)

    summary = {"scenario": args.scenario, "uri": uri, "local": data}

    m = MinIO(args.minio, minio_dir, args.port, f("minio.log"))
    lines = []

    def say(line):
        lines.append(line)
        print(line, flush=True)

    def rate(label, r, cost, served=True):
        extra = ""
        if r.get("cpu_ns"):
            extra = "; damacy kept %.1f cores busy" % (r["cpu_ns"] / r["wall_ns"])
        if served:
            extra += "; MinIO %.1f cores over the command" % (cost["minio_cpu_s"] / cost["wall_s"])
        say(
            "%-30s %8.3f GB/s of %s, %7.1f samples/s%s"
            % (label, r["output_gbps"], r["dtype"], r["samples_per_s"], extra)
        )

    try:
        log("MinIO at %s, data in %s" % (m.endpoint, minio_dir))
        m.make_bucket(args.bucket)
        env = m.env()
        _, cost = run([args.damacy, "gen", "--local", data, args.scenario, uri], env, m)
        summary["gen_upload"] = cost

        cmd = bench + ["--boxes-out", f("boxes-local.json"), "--data", data, args.scenario]
        out, cost = run(cmd, env, m, f("bench-local.json"))
        local = json.loads(out)
        summary["damacy_local"], summary["damacy_local_cost"] = local, cost
        rate("damacy, local files", local, cost, served=False)
        s3_args = ["--io-concurrency", str(args.io_concurrency)] if args.io_concurrency else []
        cmd = bench + s3_args + ["--boxes-out", f("boxes-s3.json"), "--data", uri, args.scenario]
        out, cost = run(cmd, env, m, f("bench-s3.json"))
        s3 = json.loads(out)
        summary["damacy_s3"], summary["damacy_s3_cost"] = s3, cost
        rate("damacy, s3 (MinIO, loopback)", s3, cost)
        with open(f("boxes-local.json")) as a, open(f("boxes-s3.json")) as b:
            if json.load(a)["samples"] != json.load(b)["samples"]:
                raise SystemExit("remote_compare: the two runs read different boxes")
        ratios = {"s3_over_local": s3["output_gbps"] / local["output_gbps"]}
        say("s3 / local: %.0f%% (target >= 80%%)" % (100 * ratios["s3_over_local"]))
        for c in s3.get("ceilings", []):
            if c["name"] == "GET replay":
                say(
                    "GET replay (s3 run): %.3f GB/s read, %.3f GB/s as output; %s"
                    % (c["gbps"], c["output_gbps"], c["detail"])
                )

        peers = {}
        if not args.no_peer:
            peer = [args.python, os.path.join(HERE, "tensorstore_peer.py"), "--json"]
            if args.peer_threads:
                peer += ["--threads", str(args.peer_threads)]
            if args.peer_requests:
                peer += ["--requests", str(args.peer_requests)]
            out, cost = run(peer + [f("boxes-s3.json")], env, m, f("tensorstore-s3.json"))
            peers["s3"] = json.loads(out)
            summary["tensorstore_s3_cost"] = cost
            rate("tensorstore, s3 (MinIO)", peers["s3"], cost)
            ratios["s3_over_tensorstore_s3"] = s3["output_gbps"] / peers["s3"]["output_gbps"]
            say("damacy / tensorstore, both on s3: %.2fx (target >= 3x)" % ratios["s3_over_tensorstore_s3"])
            if args.peer_local:
                out, cost = run(peer + [f("boxes-local.json")], env, m, f("tensorstore-local.json"))
                peers["local"] = json.loads(out)
                rate("tensorstore, local files", peers["local"], cost, served=False)
                ratios["local_over_tensorstore_local"] = local["output_gbps"] / peers["local"]["output_gbps"]
                say("damacy / tensorstore, both local: %.2fx" % ratios["local_over_tensorstore_local"])
        summary["tensorstore"], summary["ratios"] = peers, ratios
    finally:
        m.stop()
        if not args.keep:
            shutil.rmtree(minio_dir, ignore_errors=True)
        summary["lines"] = lines
        with open(f("compare.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
    log("reports in %s (compare.json, bench-*.json, tensorstore-*.json)" % work)


if __name__ == "__main__":
    main()
