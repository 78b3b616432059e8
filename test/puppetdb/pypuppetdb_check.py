#!/usr/bin/python3
"""Checks that PuppetDB holds what Puppetboard shows for some nodes.

Puppetboard (not packaged in Debian) reads PuppetDB through pypuppetdb;
this makes the same pypuppetdb calls its pages make (Debian's
python3-pypuppetdb 2.2, run by Debian's /usr/bin/python3) and asserts that
every given certname is there with facts, a catalog with resources and
edges, and at least one report with metrics and logs:

  overview   current_version (v2 metrics from PuppetDB 6.9.1), metric
             population num-nodes/num-resources, environments, nodes with
             status and event counts, and the per-environment counts
  nodes      nodes(query=catalog_environment, with_status=True)
  node       node(certname), node.facts(), reports of the node (newest
             first, include_total), the latest report hash
  facts      fact_names(), facts(name=...), the inventory's facts query
  reports    reports(order_by, include_total, limit, offset) and total
  report     reports(hash or configuration_version), report.events(),
             report.logs, report.metrics, event_counts(summarize_by=certname)
  catalogs   nodes with a catalog_timestamp; catalog(certname): resources
             and edges (pypuppetdb links each edge to its resources)
  resources  resources of the node, Class resources (the classes page)
  query      the query page's PQL (_query('pql')) and AST on each endpoint

Usage:
  pypuppetdb_check.py --url http://127.0.0.1:8080 CERTNAME...
  pypuppetdb_check.py --url https://127.0.0.1:8081 --cacert CA --cert CERT --key KEY CERTNAME...

It prints one line per check and exits 1 naming every missing piece (2 on
bad usage).
"""

import argparse
import json
import sys
import urllib.parse

import requests

try:
    from pypuppetdb import connect
    from pypuppetdb.QueryBuilder import (AndOperator, EqualsOperator, ExtractOperator,
                                         FunctionOperator, NullOperator, OrOperator)
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit("pypuppetdb_check: cannot import pypuppetdb (%s): install Debian's python3-pypuppetdb "
             "(scripts/puppetdb.sh install) and run this with /usr/bin/python3" % e)

# Puppetboard's defaults: UNRESPONSIVE_HOURS, NORMAL_TABLE_COUNT, its
# inventory facts.
UNRESPONSIVE_HOURS = 2
TABLE_COUNT = 100
INVENTORY_FACTS = ["fqdn", "ipaddress", "lsbdistdescription", "hardwaremodel", "kernelrelease",
                   "os", "networking"]
NEWEST_FIRST = '[{"field": "start_time", "order": "desc"}]'


class Checker:
    """Runs the checks, remembering what failed."""

    def __init__(self, db):
        self.db = db
        self.problems = []

    def ok(self, what, detail=""):
        print("ok    %s%s" % (what, (": " + detail) if detail else ""))

    def fail(self, what, why):
        self.problems.append("%s: %s" % (what, why))
        print("FAIL  %s: %s" % (what, why))

    def run(self, what, fn):
        """Runs fn; its return value is the detail of an ok line, an
        exception (AssertionError: what is missing) a failure."""
        try:
            detail = fn()
        except AssertionError as e:
            self.fail(what, str(e))
            return False
        except Exception as e:  # pypuppetdb raises requests' errors, StopIteration, KeyError...
            self.fail(what, "%s: %s" % (type(e).__name__, e))
            return False
        self.ok(what, detail or "")
        return True


def metric_version(version):
    """Puppetboard's metric_params: the v2 (Jolokia) metrics API from 6.9.1 on."""
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    return "v2" if parts > (6, 9, 0) else "v1"


def get_node(db, name):
    """db.node(name), the node page's first call; a 404 means PuppetDB has no such node."""
    try:
        return db.node(name)
    except requests.exceptions.HTTPError as e:
        if e.response is not None and e.response.status_code == 404:
            raise AssertionError("PuppetDB has no node %s" % name)
        raise


def certname_is(name):
    return EqualsOperator("certname", name)


def check_overview(c, certnames):
    db = c.db
    state = {}

    def version():
        v = db.current_version()
        state["metrics"] = metric_version(v)
        return "PuppetDB %s, metrics %s" % (v, state["metrics"])
    c.run("overview: version", version)

    def population():
        # Puppetboard's index, env '*': population metrics (v2: Jolokia read).
        prefix = "puppetlabs.puppetdb.population:name="
        version = state.get("metrics", "v2")
        nodes = db.metric(prefix + "num-nodes", version=version)["Value"]
        resources = db.metric(prefix + "num-resources", version=version)["Value"]
        assert nodes >= len(certnames), "metric num-nodes is %s, fewer than the %d nodes checked" % (nodes, len(certnames))
        # PuppetDB counts resources from PostgreSQL's table statistics:
        # -1 until catalog_resources is first analyzed. Puppetboard only
        # shows the number (and divides it by num-nodes).
        assert isinstance(resources, (int, float)), "metric num-resources is %r, not a number" % (resources,)
        note = " (not analyzed by PostgreSQL yet)" if resources < 0 else ""
        return "num-nodes %s, num-resources %s%s" % (nodes, resources, note)
    c.run("overview: population metrics (/metrics)", population)

    def metrics_page():
        # The metrics page lists every MBean (v2: Jolokia list).
        listing = db.metric(version=state.get("metrics", "v2"))
        names = [d + ":" + p for d, props in listing.items() for p in props]
        assert any(n.startswith("puppetlabs.puppetdb.population:") for n in names), "no population MBean listed"
        return "%d MBeans" % len(names)
    c.run("metrics page: MBean list", metrics_page)

    def environments():
        envs = [e["name"] for e in db.environments()]
        state["envs"] = envs
        return ", ".join(envs)
    c.run("overview: environments", environments)

    def statuses():
        nodes = {n.name: n for n in db.nodes(unreported=UNRESPONSIVE_HOURS, with_status=True,
                                             with_event_numbers=True)}
        state["nodes"] = nodes
        missing = [n for n in certnames if n not in nodes]
        assert not missing, "not among the nodes: %s" % ", ".join(missing)
        stats = {}
        for n in certnames:
            stats[nodes[n].status] = stats.get(nodes[n].status, 0) + 1
        return ", ".join("%s %d" % kv for kv in sorted(stats.items()))
    c.run("overview: nodes by status", statuses)
    return state


def check_node(c, name, state):
    db = c.db
    node_state = {}

    def overview_env():
        node = get_node(db, name)
        env = node.catalog_environment
        assert env, "no catalog_environment (no catalog?)"
        assert env in state.get("envs", [env]), "environment %s is not among the environments" % env
        count = ExtractOperator()
        count.add_field(FunctionOperator("count"))
        count.add_query(EqualsOperator("catalog_environment", env))
        n = db._query("nodes", query=count)[0]["count"]
        assert n >= 1, "no node counted in environment %s" % env
        node_state["env"] = env
        return "environment %s: %d nodes" % (env, n)
    c.run("overview %s: environment counts" % name, overview_env)

    def nodes_list():
        env = node_state.get("env")
        assert env, "its catalog environment is unknown (see above)"
        query = AndOperator()
        query.add(EqualsOperator("catalog_environment", env))
        found = [n for n in db.nodes(query=query, unreported=UNRESPONSIVE_HOURS, with_status=True) if n.name == name]
        assert found, "not listed in environment %s" % env
        n = found[0]
        assert n.status, "no status"
        return "status %s" % n.status
    c.run("nodes %s: listed with status" % name, nodes_list)

    def node_page():
        node = get_node(db, name)
        for ts in ("facts_timestamp", "catalog_timestamp", "report_timestamp"):
            assert getattr(node, ts), "no %s" % ts
        assert node.latest_report_hash, "no latest report"
        facts = list(node.facts())
        assert facts, "no facts"
        reports = list(db.reports(query=_and(certname_is(name)),
                                  order_by=NEWEST_FIRST, include_total=True, limit=TABLE_COUNT, offset=0))
        assert reports, "no reports"
        assert db.total is not None and db.total >= 1, "include_total gave %r" % db.total
        node_state["reports"] = reports
        node_state["latest"] = node.latest_report_hash
        assert any(r.hash_ == node.latest_report_hash for r in reports), \
            "the latest report %s is not among its reports" % node.latest_report_hash
        return "%d facts, %d reports, latest %s" % (len(facts), len(reports), node.latest_report_hash[:12])
    c.run("node %s: facts, reports, latest report" % name, node_page)

    def facts_pages():
        names = db.fact_names()
        mine = {f.name: f.value for f in db.facts(query=certname_is(name))}
        assert mine, "no facts"
        # fact_names lists the names of facts with a value to show: an
        # empty hash or list (a node without partitions) has none, on
        # Puppet Server's nodes too.
        missing = [f for f in mine if f not in names and mine[f] not in ({}, [])]
        assert not missing, "fact names missing from fact_names: %s" % ", ".join(missing[:5])
        fact = sorted(mine)[0]
        values = [f for f in db.facts(name=fact, query=certname_is(name))]
        assert len(values) == 1, "facts(name=%s) gave %d values" % (fact, len(values))
        inv = OrOperator()
        inv.add([EqualsOperator("name", n) for n in INVENTORY_FACTS + [fact]])
        inventory = [f for f in db.facts(query=_and(inv, certname_is(name)))]
        assert inventory, "the inventory's facts query found none"
        paths = db.fact_contents(query=certname_is(name))
        assert paths, "no fact contents"
        return "%d facts, %d fact paths" % (len(mine), len(paths))
    c.run("facts %s: names, values, inventory" % name, facts_pages)

    def reports_list():
        reports = list(db.reports(query=_and(certname_is(name)), order_by=NEWEST_FIRST,
                                  include_total=True, limit=TABLE_COUNT, offset=0))
        total = db.total
        assert reports and total, "no reports (total %r)" % total
        for r in reports:
            assert r.status in ("changed", "unchanged", "failed"), "report %s has status %r" % (r.hash_, r.status)
        return "%d reports, statuses %s" % (total, ", ".join(sorted({r.status for r in reports})))
    c.run("reports %s: list" % name, reports_list)

    def report_page():
        reports = node_state.get("reports") or []
        assert reports, "no reports to open"
        with_both = [r for r in reports if r.metrics and r.logs]
        assert with_both, "no report with both metrics and logs (%d reports)" % len(reports)
        r = with_both[0]
        by_id = OrOperator()
        by_id.add(EqualsOperator("hash", r.hash_))
        by_id.add(EqualsOperator("configuration_version", r.version))
        opened = next(db.reports(query=_and(certname_is(name), by_id)))
        events = [{"resource": "%s[%s]" % (e.item["type"], e.item["title"]), "status": e.status,
                   "old": e.item["old"], "new": e.item["new"]} for e in opened.events()]
        for log in opened.logs:
            for key in ("time", "level", "source", "tags", "message", "file", "line"):
                assert key in log, "a log lacks %s" % key
        for m in opened.metrics:
            for key in ("category", "name", "value"):
                assert key in m, "a metric lacks %s" % key
        categories = sorted({m["category"] for m in opened.metrics})
        counts = db.event_counts(query=_and(certname_is(name), EqualsOperator("report", r.hash_)),
                                 summarize_by="certname")
        return "report %s: %d events, %d logs, metrics %s, %d event counts" % (
            r.hash_[:12], len(events), len(opened.logs), "/".join(categories), len(counts))
    c.run("report %s: events, logs, metrics" % name, report_page)

    def catalog_page():
        listed = _and(NullOperator("catalog_timestamp", False), certname_is(name))
        nodes = list(db.nodes(query=listed, include_total=True, order_by='[{"field": "certname", "order": "asc"}]',
                              limit=TABLE_COUNT, offset=0))
        assert nodes, "not among the nodes with a catalog"
        cat = db.catalog(node=name)
        resources = list(cat.get_resources())
        edges = list(cat.get_edges())
        assert resources, "catalog without resources"
        assert edges, "catalog without edges"
        return "%d resources, %d edges" % (len(resources), len(edges))
    c.run("catalog %s: resources and edges" % name, catalog_page)

    def resources_pages():
        resources = list(db.resources(query=certname_is(name)))
        assert resources, "no resources"
        classes = list(db.resources(type_="Class", query=certname_is(name)))
        assert classes, "no Class resources (the classes page)"
        return "%d resources, %d classes" % (len(resources), len(classes))
    c.run("resources %s: resources and classes" % name, resources_pages)

    def query_page():
        pql = db._query("pql", query='nodes[certname, catalog_environment] { certname = %s }' % json.dumps(name))
        assert len(pql) == 1, "PQL nodes query gave %d rows" % len(pql)
        counts = {}
        ast = json.dumps(["=", "certname", name])
        for endpoint in ("nodes", "facts", "factsets", "fact-contents", "resources", "reports", "events", "edges"):
            counts[endpoint] = len(db._query(endpoint, query=ast))
        empty = [e for e in ("nodes", "facts", "factsets", "resources", "reports", "edges") if counts[e] == 0]
        assert not empty, "AST queries found nothing on %s" % ", ".join(empty)
        return ", ".join("%s %d" % kv for kv in counts.items())
    c.run("query %s: PQL and AST" % name, query_page)


def _and(*ops):
    q = AndOperator()
    for op in ops:
        q.add(op)
    return q


def connect_to(args):
    u = urllib.parse.urlsplit(args.url)
    if u.scheme not in ("http", "https") or not u.hostname:
        sys.stderr.write("pypuppetdb_check: --url must be http://HOST:PORT or https://HOST:PORT, not %r\n" % args.url)
        sys.exit(2)
    port = u.port or (8081 if u.scheme == "https" else 8080)
    if u.scheme == "https":
        if not (args.cacert and args.cert and args.key):
            sys.stderr.write("pypuppetdb_check: https needs --cacert, --cert and --key\n")
            sys.exit(2)
        return connect(host=u.hostname, port=port, protocol="https", ssl_verify=args.cacert,
                       ssl_cert=args.cert, ssl_key=args.key, url_path=u.path or "/", timeout=30)
    return connect(host=u.hostname, port=port, protocol="http", url_path=u.path or "/", timeout=30)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="PuppetDB's base URL (http or https)")
    p.add_argument("--cacert", help="the CA certificate PuppetDB's https certificate comes from")
    p.add_argument("--cert", help="client certificate (https)")
    p.add_argument("--key", help="client key (https)")
    p.add_argument("certnames", nargs="+", help="nodes that must be in PuppetDB")
    args = p.parse_args()

    c = Checker(connect_to(args))
    state = check_overview(c, args.certnames)
    for name in args.certnames:
        check_node(c, name, state)
    if c.problems:
        print("pypuppetdb_check: %d problem(s) with what Puppetboard would show from %s:" % (len(c.problems), args.url),
              file=sys.stderr)
        for prob in c.problems:
            print("  " + prob, file=sys.stderr)
        sys.exit(1)
    print("pypuppetdb_check: ok: %s" % ", ".join(args.certnames))


if __name__ == "__main__":
    main()
