// Command loadgen measures a compilefarm front door the way a fleet of
// Puppet agents loads it, on loopback only.
//
// It enrols K synthetic nodes through the Puppet CA API (key, CSR, autosign,
// certificate), then, with real mTLS:
//
//   - catalog phase: C clients, each on its own keep-alive connection (client
//     i is node i%K), loop POST /puppet/v3/catalog/NAME with the recorded
//     agent's request body (~27 KB, ~120 facts, URL-encoded twice), the
//     agent's headers, reading and (on a sample) decoding every answer.
//     Every node's catalog is compiled first (warm-up), so the run measures
//     serving stored catalogs.
//   - connections phase: C clients each open a new TLS connection per
//     request (client certificate, no keep-alive, no session resumption) and
//     GET /status/v1/simple.
//   - churn phase: the nodes upload the recorded agent's facts (PUT
//     /puppet/v3/facts) round robin, --uploads times, changing volatile
//     facts on every upload and a fact the benchmark manifests read on
//     --used-change of them; the broker's metrics count the compiles.
//   - corpus phase: the same on the corpus of real modules
//     (internal/corpus): node i takes corpus node i%18's facts and role,
//     every check-in changes the volatile facts as a real agent's next run
//     does (corpus.Churn), --used-change of them also a fact the node's
//     role reads (corpus.UsedChange). The target is one compile per such
//     change. The broker must serve the corpus environment: --build-corpus
//     DIR writes it and prints the environmentpath to start the broker with.
//
// Each catalog or connection run is bounded by --duration and
// --max-requests. Results: requests (or connections) per second, latency
// percentiles, bytes per response, errors, compiles per 1,000 uploads; as
// text, --json or --markdown.
//
//	go run ./bench/loadgen --target 127.0.0.1:8140 --clients 1,16,128 --metrics http://127.0.0.1:9140/metrics
//	go run ./bench/loadgen --build-corpus /tmp/corpus   # prints /tmp/corpus: broker dev --environments /tmp/corpus
//	go run ./bench/loadgen --target 127.0.0.1:8140 --metrics http://127.0.0.1:9140/metrics --admin http://127.0.0.1:9141 --phase corpus --nodes 36 --uploads 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/bench/internal/latency"
	"github.com/compilefarm/compilefarm/bench/internal/loopback"
	"github.com/compilefarm/compilefarm/internal/corpus"
)

// outFlag is a flag that works alone (--json: write to stdout) or with a
// file (--json=FILE).
type outFlag struct{ path string }

func (o *outFlag) String() string   { return o.path }
func (o *outFlag) IsBoolFlag() bool { return true }
func (o *outFlag) Set(v string) error {
	switch v {
	case "true", "-":
		o.path = "-"
	case "false":
		o.path = ""
	default:
		o.path = v
	}
	return nil
}

func (o *outFlag) write(fn func(io.Writer) error) error {
	if o.path == "" {
		return nil
	}
	if o.path == "-" {
		return fn(os.Stdout)
	}
	f, err := os.Create(o.path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runConfig bounds every measured run.
type runConfig struct {
	environment string
	duration    time.Duration
	maxRequests int64
	verifyEvery int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		target      = flag.String("target", "127.0.0.1:8140", "front door host:port (loopback only: 127.0.0.0/8, ::1 or localhost)")
		clientsFlag = flag.String("clients", "1,16,128", "concurrent clients, a comma-separated list: one run per value")
		nodesN      = flag.Int("nodes", 32, "synthetic nodes K to enrol (client i is node i%K)")
		duration    = flag.Duration("duration", 10*time.Second, "length of each measured run")
		maxReq      = flag.Int64("max-requests", 1_000_000, "at most this many requests (or connections) per run")
		environment = flag.String("environment", "production", "Puppet environment the nodes ask for")
		phase       = flag.String("phase", "all", "catalog, connections, all (both), churn (compiles per fact uploads; needs --metrics), "+
			"or corpus (the same on the corpus of real modules; needs --metrics and a broker serving --build-corpus's environment)")
		uploads     = flag.Int("uploads", 1000, "churn and corpus phases: fact uploads (check-ins) to send after the baseline")
		usedChange  = flag.Float64("used-change", 0.01, "churn and corpus phases: fraction of uploads that change a fact the catalogs read")
		buildCorpus = flag.String("build-corpus", "", "write the corpus environment (internal/corpus, Debian's puppet modules) into DIR, "+
			"print its environmentpath (for broker dev --environments) and exit")
		factsMode = flag.String("facts", "same", "catalog uploads: same (identical facts each run), fresh (a new facts timestamp per request, "+
			"as successive agent runs send), or same,fresh for both")
		keyType     = flag.String("key", "ecdsa", "node key type: ecdsa (P-256) or rsa (2048)")
		prefix      = flag.String("prefix", "", "certname prefix (default lg-<time>; certnames are PREFIX-NNNN.<domain>, PREFIX-NNNN-<corpus node>.<domain> in the corpus phase)")
		domain      = flag.String("domain", "loadgen.test", "certname domain of the synthetic nodes")
		metricsURL  = flag.String("metrics", "", "the broker's /metrics URL (loopback), to report its CPU per request, catalog outcomes and compile times")
		adminURL    = flag.String("admin", "http://127.0.0.1:9141", "the broker's operator API (its --admin-listen, loopback), for compile times and the corpus phase's node records")
		verifyEvery = flag.Int("verify-every", 100, "decompress and check every Nth catalog per client (and each client's first)")
		warmupLimit = flag.Duration("warmup-timeout", 10*time.Minute, "bound on the warm-up (every node's first compile)")
		overall     = flag.Duration("timeout", 30*time.Minute, "bound on the whole invocation")
		goGroups    = flag.Bool("go-tls-groups", false, "offer Go's default TLS key exchange groups (X25519MLKEM768 first) instead of the agent's (X25519, P-256, ...)")
		bodyFile    = flag.String("request-body", "", "catalog request body to use instead of the built-in recording (form-urlencoded, facts encoded twice)")
		jsonOut     outFlag
		mdOut       outFlag
		tsvOut      outFlag
	)
	flag.Var(&jsonOut, "json", "write results as JSON to stdout (--json) or a file (--json=FILE)")
	flag.Var(&mdOut, "markdown", "write results as Markdown tables, a row per run, to stdout (--markdown) or a file (--markdown=FILE)")
	flag.Var(&tsvOut, "tsv", "write one tab-separated line per run (phase clients facts per_second p50 p90 p99 max errors) to stdout or --tsv=FILE, for scripts")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: loadgen --target 127.0.0.1:PORT [flags]\n\n"+
			"Measures a compilefarm front door like a fleet of Puppet agents (loopback only).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *buildCorpus != "" {
		envpath, err := corpus.Build(*buildCorpus)
		if err != nil {
			return err
		}
		fmt.Println(envpath)
		return nil
	}

	if err := loopback.Check("--target", *target); err != nil {
		return err
	}
	if *metricsURL != "" {
		if err := loopback.CheckURL("--metrics", *metricsURL); err != nil {
			return err
		}
		if err := loopback.CheckURL("--admin", *adminURL); err != nil {
			return err
		}
	}
	clients, err := parseList(*clientsFlag)
	if err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	var modes []bool
	for _, m := range strings.Split(*factsMode, ",") {
		switch strings.TrimSpace(m) {
		case "same":
			modes = append(modes, false)
		case "fresh":
			modes = append(modes, true)
		default:
			return fmt.Errorf("--facts %q: want same, fresh or same,fresh", *factsMode)
		}
	}
	doCatalog, doConns := *phase == "catalog" || *phase == "all", *phase == "connections" || *phase == "all"
	doChurn, doCorpus := *phase == "churn", *phase == "corpus"
	if !doCatalog && !doConns && !doChurn && !doCorpus {
		return fmt.Errorf("--phase %q: want catalog, connections, all, churn or corpus", *phase)
	}
	if (doChurn || doCorpus) && (*metricsURL == "" || *uploads < 1 || *uploads > 1_000_000 || *usedChange < 0 || *usedChange > 1) {
		return fmt.Errorf("--phase %s needs --metrics, --uploads between 1 and 1000000 and --used-change between 0 and 1", *phase)
	}
	switch {
	case *nodesN < 1 || *nodesN > 100_000:
		return fmt.Errorf("--nodes must be between 1 and 100000")
	case *duration <= 0 || *duration > time.Hour:
		return fmt.Errorf("--duration must be between 0 and 1h")
	case *maxReq < 1:
		return fmt.Errorf("--max-requests must be at least 1")
	case *verifyEvery < 1:
		return fmt.Errorf("--verify-every must be at least 1")
	case *keyType != "ecdsa" && *keyType != "rsa":
		return fmt.Errorf("--key %q: want ecdsa or rsa", *keyType)
	}
	if *prefix == "" {
		*prefix = "lg-" + strconv.FormatInt(time.Now().Unix(), 36)
	}
	recorded := agentwire.RecordedCatalogRequest
	if *bodyFile != "" {
		if recorded, err = os.ReadFile(*bodyFile); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *overall)
	defer cancel()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "loadgen: %s\n", s) }

	rep := &Report{Target: *target, Environment: *environment, Started: time.Now().UTC(), Key: *keyType, Nodes: *nodesN,
		Command: strings.Join(os.Args, " ")}
	cfg := runConfig{environment: *environment, duration: *duration, maxRequests: *maxReq, verifyEvery: *verifyEvery}

	// Enrol.
	var cnodes []corpus.Node
	if doCorpus {
		if cnodes, err = corpus.Nodes(); err != nil {
			return err
		}
	}
	names := make([]string, *nodesN)
	for i := range names {
		if doCorpus {
			names[i] = corpusName(*prefix, i, cnodes[i%len(cnodes)], *domain)
		} else {
			names[i] = fmt.Sprintf("%s-%04d.%s", *prefix, i, *domain)
		}
	}
	t0 := time.Now()
	progress(fmt.Sprintf("enrolling %d nodes (%s keys) at %s", len(names), *keyType, *target))
	farm, err := agentcert.FetchCA(ctx, *target)
	if err != nil {
		return err
	}
	farm.GoGroups = *goGroups
	nodes, err := enrolAll(ctx, farm, names, *keyType, 8)
	if err != nil {
		return err
	}
	rep.EnrolSecs = round(time.Since(t0).Seconds(), 2)
	progress(fmt.Sprintf("enrolled %d nodes in %.1fs", len(nodes), rep.EnrolSecs))

	if doCatalog {
		for _, n := range nodes {
			if n.body, err = newBodyTemplate(recorded, n.name, *environment); err != nil {
				return fmt.Errorf("catalog request for %s: %w", n.name, err)
			}
		}
		before, _ := brokermetrics.Scrape(ctx, *metricsURL)
		t0 = time.Now()
		progress(fmt.Sprintf("warm-up: asking for %d first catalogs (each waits for its compile)", len(nodes)))
		info, wire, err := warmUp(ctx, farm, nodes, *environment, *warmupLimit, progress)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		rep.WarmupSecs = round(time.Since(t0).Seconds(), 1)
		rep.CatalogBytes, rep.CatalogGzip, rep.CatalogRes = info.decoded, wire, info.resources
		if after, err := brokermetrics.Scrape(ctx, *metricsURL); err == nil && after != nil {
			n := after["compilefarm_compile_duration_seconds_count"] - before["compilefarm_compile_duration_seconds_count"]
			if n > 0 {
				rep.Compiles = n
				rep.CompileMeanSecs = round((after["compilefarm_compile_duration_seconds_sum"]-before["compilefarm_compile_duration_seconds_sum"])/n, 3)
			}
		}
		if ds, err := compileDurations(ctx, *metricsURL, *adminURL, names); err != nil {
			progress(fmt.Sprintf("compile durations from the operator API: %v", err))
		} else if len(ds) > 0 {
			p := latency.Summarize(ds)
			rep.CompileMs = &p
		}
		progress(fmt.Sprintf("catalog: %d resources, %d bytes JSON, %d bytes gzip on the wire", info.resources, info.decoded, wire))
		for _, fresh := range modes {
			for _, c := range clients {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				progress(fmt.Sprintf("catalog run: %d clients, facts %s, up to %s / %d requests", c, map[bool]string{false: "same", true: "fresh"}[fresh], *duration, *maxReq))
				var res Result
				measureAround(ctx, *metricsURL, &res, func() { res = runCatalogs(ctx, farm, nodes, cfg, c, fresh) })
				rep.Runs = append(rep.Runs, res)
				progress(fmt.Sprintf("  %.0f req/s, p50 %.2fms p99 %.2fms, %d errors", res.PerSecond, res.Latency.P50, res.Latency.P99, res.Errors))
			}
		}
	}
	if doChurn {
		progress(fmt.Sprintf("churn: %d fact uploads over %d nodes, %.1f%% changing a fact the manifests read", *uploads, len(nodes), *usedChange*100))
		res, err := runChurn(ctx, farm, nodes, recorded, *environment, *metricsURL, *uploads, *usedChange, progress)
		if err != nil {
			return fmt.Errorf("churn: %w", err)
		}
		rep.Churn = &res
		progress(fmt.Sprintf("  %v compiles for %d uploads (%d changed a used fact): %.2f per 1,000", res.Compiles, res.Uploads, res.UsedChanges, res.PerThousand))
	}
	var corpusErr error
	if doCorpus {
		progress(fmt.Sprintf("corpus: %d check-ins over %d nodes (the %d corpus nodes' facts and roles), %.1f%% changing a fact the role reads",
			*uploads, len(nodes), len(cnodes), *usedChange*100))
		res, err := runCorpus(ctx, farm, nodes, cnodes, *environment, *metricsURL, *adminURL, *uploads, *usedChange, progress)
		if err != nil {
			return fmt.Errorf("corpus: %w", err)
		}
		rep.Corpus = &res
		progress(fmt.Sprintf("  %.0f compiles for %d check-ins (%d changed a used fact): %.2f per 1,000, target %.2f; %.0f extra, %.0f failed",
			res.Compiles, res.Uploads, res.UsedChanges, res.PerThousand, res.Target, res.Extra, res.Failed))
		for _, n := range res.Unexpected {
			progress("  unexpected: " + n.String())
		}
		corpusErr = res.failure()
	}
	if doConns {
		for _, c := range clients {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			progress(fmt.Sprintf("connection run: %d clients, a new mTLS connection per request, up to %s / %d connections", c, *duration, *maxReq))
			var res Result
			measureAround(ctx, *metricsURL, &res, func() { res = runConnections(ctx, farm, nodes, cfg, c) })
			rep.Runs = append(rep.Runs, res)
			progress(fmt.Sprintf("  %.0f conn/s, p50 %.2fms p99 %.2fms, %d errors", res.PerSecond, res.Latency.P50, res.Latency.P99, res.Errors))
		}
	}

	err = errors.Join(
		corpusErr,
		jsonOut.write(rep.writeJSON),
		mdOut.write(func(w io.Writer) error { rep.writeMarkdown(w); return nil }),
		tsvOut.write(rep.writeTSV),
	)
	if jsonOut.path != "-" && mdOut.path != "-" && tsvOut.path != "-" {
		rep.writeText(os.Stdout)
	}
	return err
}

func parseList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 10_000 {
			return nil, fmt.Errorf("%q: want positive integers up to 10000, comma separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}
