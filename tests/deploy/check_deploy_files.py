#!/usr/bin/env python3
"""Static checks of the deployment files against the repository and the server's config.

Parses Dockerfile, docker-compose.yml, deploy/kubernetes/*.yaml, deploy/prometheus/*.yml and
deploy/grafana/ and checks that every repository path, port, HTTP path and config file they
name exists and agrees with config/server.yaml, server/http/http.cc, server/metrics/ and
server/serving/scrape_metrics.cc (the scrape-time gauges).
No Docker engine is needed. Exit 0: all checks pass; 1: a mismatch (each one printed);
77: python3-yaml missing (ctest SKIP_RETURN_CODE).

  check_deploy_files.py SOURCE_DIR [KILND_BINARY KILND_BUILD_RELPATH KILN_BUILD_RELPATH]
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (Debian: python3-yaml)")
    sys.exit(77)

SRC = os.path.abspath(sys.argv[1])
KILND = sys.argv[2] if len(sys.argv) > 2 else ""
KILND_REL = sys.argv[3] if len(sys.argv) > 3 else "server/kilnd"
KILN_REL = sys.argv[4] if len(sys.argv) > 4 else "tools/kiln"
# The tokenizer shim kilnd loads from its own folder (server/generate/tokenizer.h), beside it.
SHIM_REL = os.path.join(os.path.dirname(KILND_REL), "libkiln_spm_shim.so")
errors = []
checks = 0


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        errors.append(msg)
        print("FAIL:", msg)


def read(rel):
    with open(os.path.join(SRC, rel)) as f:
        return f.read()


def load_yaml(rel):
    with open(os.path.join(SRC, rel)) as f:
        return yaml.safe_load(f)


def port_of(address):
    return int(address.rsplit(":", 1)[1])


# ---- the server's side --------------------------------------------------------------------
server_cfg = load_yaml("config/server.yaml")
GRPC = port_of(server_cfg["server"]["grpc_address"])
HTTP = port_of(server_cfg["server"]["http_address"])
MODEL_REPO = server_cfg["model_repository"]
http_cc = read("server/http/http.cc")
for path in ("/healthz", "/readyz", "/metrics"):
    check(f'Get("{path}"' in http_cc, f"server/http/http.cc serves no {path}")
metrics_cc = "".join(read(f"server/metrics/{f}") for f in sorted(os.listdir(os.path.join(SRC, "server/metrics")))
                     if f.endswith(".cc")) + read("server/serving/scrape_metrics.cc")
METRICS = set(re.findall(r'"(kiln_[a-z_]+)"', metrics_cc))
check("kiln_queue_depth" in METRICS, "kiln_queue_depth not found in kiln_metrics.cc")
check(os.path.isdir(os.path.join(SRC, MODEL_REPO)), f"model_repository {MODEL_REPO} missing")
check(glob.glob(os.path.join(SRC, MODEL_REPO, "*", "*", "model.onnx")),
      f"no <name>/<version>/model.onnx under {MODEL_REPO}")
config_flags = set(re.findall(r'\{"(--[a-z-]+)"', read("server/serving/config.cc"))) | {"--config"}


def check_kilnd_args(args, where, path_map):
    """kilnd's command line: known flags; --config points at a file of the repository."""
    check("--config" in args, f"{where}: kilnd is not started with --config")
    for i, a in enumerate(args):
        if a.startswith("--"):
            check(a in config_flags, f"{where}: unknown kilnd flag {a}")
    if "--config" in args:
        cfg = args[args.index("--config") + 1]
        rel = path_map(cfg)
        check(rel is not None and os.path.isfile(os.path.join(SRC, rel)),
              f"{where}: --config {cfg} is no file of the repository (maps to {rel})")
        check(rel == "config/server.yaml", f"{where}: --config {cfg} is not config/server.yaml")


# ---- Dockerfile ---------------------------------------------------------------------------
def dockerfile_instructions(text):
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def exec_form(rest):
    return json.loads(rest) if rest.startswith("[") else shlex.split(rest)


instr = dockerfile_instructions(read("Dockerfile"))
stages = {}  # name -> list of (instr, rest)
order = []
current = None
for word, rest in instr:
    if word == "FROM":
        parts = rest.split()
        name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else f"#{len(order)}"
        current = stages.setdefault(name, [])
        current.append((word, rest))
        order.append(name)
    elif current is not None:
        current.append((word, rest))
for st in ("build-deps", "build", "runtime", "build-cuda", "runtime-cuda"):
    check(st in stages, f"Dockerfile: no stage {st}")
build = stages.get("build", [])
runtime = stages.get("runtime", [])
check(stages.get("build", [("", "")])[0][1].startswith("build-deps ") and
      stages.get("build-cuda", [("", "")])[0][1].startswith("build-deps "),
      "Dockerfile: build and build-cuda do not start FROM build-deps")
check(stages.get("runtime-cuda", [("", "")])[0][1].startswith("runtime "),
      "Dockerfile: runtime-cuda does not start FROM runtime")
deps_runs = " ".join(r for w, r in stages.get("build-deps", []) if w == "RUN")
check("KILN_DEPS=build scripts/install-deps.sh" in deps_runs,
      "Dockerfile build-deps stage does not run KILN_DEPS=build scripts/install-deps.sh")
for st in ("build", "build-cuda"):
    runs = " ".join(r for w, r in stages.get(st, []) if w == "RUN")
    check("-DKILN_BUILD_TESTS=OFF" in runs, f"Dockerfile {st}: tests not off")
    check("-G Ninja" in runs, f"Dockerfile {st}: not the CI's Ninja build")
    check("--mount=type=cache" in runs and "CCACHE_DIR" in runs,
          f"Dockerfile {st}: no ccache in a BuildKit cache mount")
check("-DKILN_WITH_CUDA=OFF" in " ".join(r for w, r in build if w == "RUN"),
      "Dockerfile build (the CPU image): CUDA not off")
check("KILN_HAVE_CUDA:INTERNAL=ON" in " ".join(r for w, r in stages.get("build-cuda", [])),
      "Dockerfile build-cuda does not insist on the CUDA backend")
check("option(KILN_BUILD_TESTS" in read("CMakeLists.txt"), "CMakeLists.txt has no KILN_BUILD_TESTS")
check('KILN_DEPS:-all' in read("scripts/install-deps.sh"), "install-deps.sh has no KILN_DEPS modes")
# COPY sources exist; --from=build sources are the CMake targets' build paths.
copies = {}  # container path -> repo path
for name, body in stages.items():
    for w, rest in body:
        if w != "COPY":
            continue
        args = [a for a in rest.split() if not a.startswith("--")]
        from_stage = [a for a in rest.split() if a.startswith("--from=")]
        src, dest = args[:-1], args[-1]
        for s in src:
            if from_stage:
                # build -> /src/build/, build-cuda -> /src/build-cuda/: the CMake paths.
                prefix = "/src/" + from_stage[0].split("=", 1)[1] + "/"
                rel = s[len(prefix):] if s.startswith(prefix) else None
                check(rel in (KILND_REL, KILN_REL, SHIM_REL),
                      f"Dockerfile: COPY {from_stage[0]} {s} is not the build path of "
                      f"kilnd/kiln/the tokenizer shim ({KILND_REL}, {KILN_REL}, {SHIM_REL}) "
                      f"under {prefix}")
            else:
                check(os.path.exists(os.path.join(SRC, s)), f"Dockerfile: COPY {s} missing")
                if s != ".":
                    copies[dest.rstrip("/")] = s.rstrip("/")


def container_to_repo(path):
    for dest, src in sorted(copies.items(), key=lambda kv: -len(kv[0])):
        if path == dest or path.startswith(dest + "/"):
            return src + path[len(dest):]
    return None


expose = set()
for w, rest in runtime:
    if w == "EXPOSE":
        expose |= {int(p.split("/")[0]) for p in rest.split()}
check(expose == {GRPC, HTTP}, f"Dockerfile EXPOSE {expose} != config ports {{{GRPC}, {HTTP}}}")
envs = " ".join(r for w, r in runtime if w == "ENV")
check("OMP_WAIT_POLICY=PASSIVE" in envs and "GOMP_SPINCOUNT=1000" in envs,
      "Dockerfile: no ENV OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 (kilnd's default)")
health = " ".join(r for w, r in runtime if w == "HEALTHCHECK")
check(f"127.0.0.1:{HTTP}/readyz" in health, "Dockerfile HEALTHCHECK is not /readyz on HTTP")
check("/usr/local/bin/kiln-healthcheck" in health and
      "COPY deploy/docker/kiln-healthcheck /usr/local/bin/kiln-healthcheck" in
      " ".join(f"{w} {r}" for w, r in runtime), "Dockerfile: kiln-healthcheck not installed")
check("USER 10001" in " ".join(f"{w} {r}" for w, r in stages.get("runtime-cuda", []))
      .split("USER root")[-1], "Dockerfile runtime-cuda does not end as user 10001")
workdir = [r for w, r in runtime if w == "WORKDIR"][-1]
entry = exec_form([r for w, r in runtime if w == "ENTRYPOINT"][-1])
cmd = exec_form([r for w, r in runtime if w == "CMD"][-1])
check(entry[0].endswith("/kilnd"), "Dockerfile ENTRYPOINT is not kilnd")
check_kilnd_args(cmd, "Dockerfile CMD", container_to_repo)
image_model_repo = os.path.join(workdir, MODEL_REPO)
check(container_to_repo(image_model_repo) == MODEL_REPO,
      f"Dockerfile: model repository {image_model_repo} is not the repo's {MODEL_REPO}")
cache_dir = cmd[cmd.index("--engine-cache-dir") + 1] if "--engine-cache-dir" in cmd else None
volumes = set()
for w, rest in runtime:
    if w == "VOLUME":
        volumes |= set(exec_form(rest))
check(volumes == {image_model_repo, cache_dir},
      f"Dockerfile VOLUME {volumes} != model repository + engine cache")
# Runtime packages: the same list as install-deps.sh's runtime mode, covering ldd of kilnd.
apt_line = next((r for w, r in runtime if w == "RUN" and "apt-get install" in r), "")
docker_pkgs = {t for t in apt_line.split("apt-get install", 1)[-1].split("&&")[0].split()
               if not t.startswith("-")}
m = re.search(r"runtime_pkgs=\(([^)]*)\)", read("scripts/install-deps.sh"))
script_pkgs = set(m.group(1).split()) if m else set()
check(docker_pkgs and docker_pkgs == script_pkgs,
      f"Dockerfile runtime packages {sorted(docker_pkgs ^ script_pkgs)} differ from "
      "install-deps.sh runtime_pkgs")
if KILND and os.path.exists(KILND) and shutil.which("ldd") and shutil.which("dpkg"):
    libs = re.findall(r"=> (\S+)", subprocess.run(["ldd", KILND], capture_output=True,
                                                 text=True).stdout)
    owner = {}  # path -> package, from one dpkg -S call (it is slow per call)
    paths = sorted({p for lib in libs for p in (os.path.realpath(lib), lib)})
    out = subprocess.run(["dpkg", "-S"] + paths, capture_output=True, text=True).stdout
    for line in out.splitlines():
        pkg, _, path = line.partition(": ")
        owner[path.strip()] = pkg.split(":")[0]
    needed = set()
    for lib in libs:
        pkg = owner.get(os.path.realpath(lib)) or owner.get(lib)
        check(pkg is not None, f"ldd kilnd: {lib} belongs to no Debian package")
        if pkg:
            needed.add(pkg)
    essential = {"libc6", "libgcc-s1"}  # in every debian:12-slim
    missing = needed - docker_pkgs - essential
    check(not missing, f"Dockerfile runtime stage lacks packages kilnd loads: {sorted(missing)}")
    print(f"ldd kilnd: {len(needed)} packages, all in the runtime stage")

# ---- docker-compose.yml ---------------------------------------------------------------------
compose = load_yaml("docker-compose.yml")
services = compose["services"]
for name in ("kiln", "kiln-gpu", "prometheus", "grafana"):
    check(name in services, f"docker-compose.yml: no service {name}")
top_volumes = set((compose.get("volumes") or {}).keys())
prom_cfg_container = None
for name, svc in services.items():
    b = svc.get("build")
    if b:
        check(os.path.isfile(os.path.join(SRC, b.get("context", "."), "Dockerfile")),
              f"compose {name}: build context has no Dockerfile")
        check(b.get("target") in stages, f"compose {name}: target {b.get('target')} not a stage")
    for v in svc.get("volumes", []):
        src, dest = v.split(":")[:2]
        if src.startswith("."):
            check(os.path.exists(os.path.join(SRC, src)), f"compose {name}: {src} missing")
        else:
            check(src in top_volumes, f"compose {name}: volume {src} not declared")
    for p in svc.get("ports", []):
        host, cont = str(p).split(":")[-2:]
        if name.startswith("kiln"):
            check(int(cont) in (GRPC, HTTP), f"compose {name}: port {p} is not a kilnd port")
    if name.startswith("kiln"):
        ports = {int(str(p).split(":")[-1]) for p in svc.get("ports", [])}
        check(ports == {GRPC, HTTP}, f"compose {name}: container ports {ports}")
        check_kilnd_args(svc["command"], f"compose {name} command", container_to_repo)
        check(svc["command"] == cmd, f"compose {name}: command differs from the Dockerfile CMD")
        targets = {v.split(":")[1] for v in svc["volumes"]}
        check(targets == volumes, f"compose {name}: volumes {targets} != Dockerfile VOLUME")
        hc = " ".join(svc["healthcheck"]["test"])
        check(f":{HTTP}/readyz" in hc and hc == "CMD " + health.split("CMD ", 1)[1]
              .strip("[] ").replace('"', "").replace(",", ""),
              f"compose {name}: healthcheck is not the image's (/readyz): {hc}")
        check(svc.get("read_only") is True, f"compose {name}: root filesystem not read_only")
        check(svc.get("environment", {}).get("OMP_WAIT_POLICY") == "PASSIVE" and
              str(svc.get("environment", {}).get("GOMP_SPINCOUNT")) == "1000",
              f"compose {name}: OMP_WAIT_POLICY / GOMP_SPINCOUNT")
gpu = services.get("kiln-gpu", {})
check(gpu.get("profiles") == ["gpu"], "compose kiln-gpu is not in the gpu profile")
devs = gpu.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
check(devs and "gpu" in devs[0].get("capabilities", []), "compose kiln-gpu: no GPU reservation")
check("profiles" not in services.get("kiln", {}), "compose kiln must start without a profile")
prom = services.get("prometheus", {})
mounts = {v.split(":")[1]: v.split(":")[0] for v in prom.get("volumes", [])}
cfg_flag = next(a for a in prom["command"] if a.startswith("--config.file="))
prom_cfg_container = cfg_flag.split("=", 1)[1]
check(mounts.get(prom_cfg_container) == "./deploy/prometheus/prometheus.yml",
      "compose prometheus: --config.file is not deploy/prometheus/prometheus.yml")

# ---- Prometheus -----------------------------------------------------------------------------
pcfg = load_yaml("deploy/prometheus/prometheus.yml")
for rf in pcfg["rule_files"]:
    container = os.path.join(os.path.dirname(prom_cfg_container), rf)
    check(mounts.get(container) == "./deploy/prometheus/" + rf,
          f"prometheus rule_files {rf}: not mounted at {container}")
    check(os.path.isfile(os.path.join(SRC, "deploy/prometheus", rf)), f"rule file {rf} missing")
jobs = {j["job_name"]: j for j in pcfg["scrape_configs"]}
for job, svc in (("kilnd", "kiln"), ("kilnd-gpu", "kiln-gpu")):
    j = jobs.get(job, {})
    check(j.get("metrics_path", "/metrics") == "/metrics", f"prometheus job {job}: path")
    tg = [t for sc in j.get("static_configs", []) for t in sc["targets"]]
    check(tg == [f"{svc}:{HTTP}"], f"prometheus job {job}: targets {tg} != {svc}:{HTTP}")
rules = load_yaml("deploy/prometheus/rules.yml")
recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]

# ---- Grafana --------------------------------------------------------------------------------
graf = services.get("grafana", {})
gmounts = {v.split(":")[1]: v.split(":")[0] for v in graf.get("volumes", [])}
ds = load_yaml("deploy/grafana/provisioning/datasources/prometheus.yml")["datasources"][0]
prom_port = int(str(prom["ports"][0]).split(":")[-1])
check(ds["url"] == f"http://prometheus:{prom_port}", f"grafana datasource url {ds['url']}")
prov = load_yaml("deploy/grafana/provisioning/dashboards/kiln.yml")["providers"][0]
dash_dir = gmounts.get(prov["options"]["path"])
check(dash_dir == "./deploy/grafana/dashboards", f"grafana provider path not mounted: {dash_dir}")
check(gmounts.get("/etc/grafana/provisioning") == "./deploy/grafana/provisioning",
      "grafana provisioning not mounted")
home = graf.get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH", "")
check(home.startswith(prov["options"]["path"] + "/") and os.path.isfile(
    os.path.join(SRC, "deploy/grafana/dashboards", os.path.basename(home))),
    f"grafana home dashboard {home} missing")
dash_files = glob.glob(os.path.join(SRC, "deploy/grafana/dashboards/*.json"))
check(dash_files, "no dashboard JSON")
for f in dash_files:
    d = json.load(open(f))
    for p in d["panels"]:
        check(p["datasource"]["uid"] == ds["uid"], f"{p['title']}: datasource uid")
        for t in p["targets"]:
            exprs.append(t["expr"])

# Every metric an expression names is exported by kilnd (or recorded by a rule).
for e in exprs:
    for name in re.findall(r"\b(kiln[_:][a-z0-9_:]*)", e):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        check(name in METRICS or base in METRICS or name in recorded,
              f"expression names unknown metric {name}: {e}")

# ---- Kubernetes -----------------------------------------------------------------------------
k8s = {}
for f in sorted(glob.glob(os.path.join(SRC, "deploy/kubernetes/*.yaml"))):
    for doc in yaml.safe_load_all(open(f)):
        k8s.setdefault(doc["kind"], []).append((os.path.basename(f), doc))
deps = k8s.get("Deployment", [])
check(len(deps) == 2, "expected deployment.yaml and deployment-gpu.yaml")
images = {svc.get("image") for svc in services.values()}
for f, d in deps:
    tmpl = d["spec"]["template"]
    check(d["spec"]["selector"]["matchLabels"].items() <= tmpl["metadata"]["labels"].items(),
          f"{f}: selector does not match the pod labels")
    ann = tmpl["metadata"]["annotations"]
    check(ann.get("prometheus.io/port") == str(HTTP) and ann.get("prometheus.io/path") == "/metrics"
          and ann.get("prometheus.io/scrape") == "true", f"{f}: scrape annotations")
    c = tmpl["spec"]["containers"][0]
    check(c["image"] in images, f"{f}: image {c['image']} is not one compose builds")
    check_kilnd_args(c["args"], f"{f} args", container_to_repo)
    check(c["args"] == cmd, f"{f}: args differ from the Dockerfile CMD")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"grpc": GRPC, "http": HTTP}, f"{f}: container ports {ports}")
    check(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"},
          f"{f}: readiness probe")
    check(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"},
          f"{f}: liveness probe")
    check({"name": "OMP_WAIT_POLICY", "value": "PASSIVE"} in c["env"] and
          {"name": "GOMP_SPINCOUNT", "value": "1000"} in c["env"], f"{f}: OMP_WAIT_POLICY / GOMP_SPINCOUNT")
    check("resources" in c and "requests" in c["resources"], f"{f}: resources")
    for vm in c.get("volumeMounts", []):
        check(vm["mountPath"] in volumes, f"{f}: mount {vm['mountPath']} is no image VOLUME")
    if "gpu" in f:
        check(c["resources"]["limits"].get("nvidia.com/gpu") == 1, f"{f}: no nvidia.com/gpu")
for f, s in k8s.get("Service", []):
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in s["spec"]["ports"]}
    check(ports == {"grpc": (GRPC, "grpc"), "http": (HTTP, "http")}, f"{f}: ports {ports}")
    pod_labels = deps[0][1]["spec"]["template"]["metadata"]["labels"] if deps else {}
    check(s["spec"]["selector"].items() <= pod_labels.items(), f"{f}: selector")
dep_names = {d["metadata"]["name"] for _, d in deps}
for f, h in k8s.get("HorizontalPodAutoscaler", []):
    check(h["apiVersion"] == "autoscaling/v2", f"{f}: not autoscaling/v2")
    check(h["spec"]["scaleTargetRef"]["name"] in dep_names, f"{f}: scale target")
    m = h["spec"]["metrics"][0]
    check(m["type"] == "Pods" and m["pods"]["metric"]["name"] in METRICS,
          f"{f}: Pods metric is not a kilnd metric")

# ---- build wiring ---------------------------------------------------------------------------
ignore = [ln.strip() for ln in read(".dockerignore").splitlines()
          if ln.strip() and not ln.startswith("#")]


def docker_ignored(path):
    """Whether a .dockerignore pattern (no ! rules here) excludes path or a folder above it."""
    import fnmatch
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(p, pat.strip("/").removeprefix("**/")) or
               fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pat.removeprefix("**/"))
               if pat.startswith("**/") else fnmatch.fnmatchcase(p, pat.strip("/"))
               for pat in ignore for p in prefixes)


needed = ["scripts/install-deps.sh", "config", "CMakeLists.txt", "config/models/example"]
needed += sorted(set(copies.values()))
needed += [os.path.relpath(os.path.join(d, "CMakeLists.txt"), SRC)
           for d in glob.glob(os.path.join(SRC, "*")) if d.rsplit("/", 1)[-1] != "tests"
           and os.path.isfile(os.path.join(d, "CMakeLists.txt"))]
for n in needed:
    check(not docker_ignored(n), f".dockerignore excludes {n}, which the image build needs")
for d in ("build", "build-ctr", "build-cuda", ".git", "tools/ort/node_modules", "bench/results"):
    check(docker_ignored(d), f".dockerignore does not keep {d}/ out of the build context")

print(f"{checks} checks, {len(errors)} failed")
sys.exit(1 if errors else 0)
