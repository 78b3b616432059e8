package compiler

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/digestcache"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// Code gives engines a code snapshot on disk and turns compiled catalogs
// into static ones against the same snapshot.
type Code interface {
	// EnvironmentPath returns a Puppet environmentpath holding codeID's
	// snapshot; it never changes for a codeID.
	EnvironmentPath(ctx context.Context, codeID string) (string, error)
	// MakeStatic inlines file metadata for puppet:/// sources and sets code_id.
	MakeStatic(ctx context.Context, catalog []byte, codeID string) ([]byte, error)
	// Publish rewrites checkout paths in text (a compile error) to the
	// paths agents and operators are shown.
	Publish(ctx context.Context, codeID string, text []byte) ([]byte, error)
}

// Pool drains the compile queue: each worker takes a job, compiles it with
// the engine, stores the catalog (plain and gzipped, content addressed) and
// moves the node's catalog pointer forward with a sequence check, so a late
// or duplicate compile never replaces a newer catalog. When Content is a
// farm.ContentRetirer it retires the catalogs a move dropped
// (retention.go).
type Pool struct {
	Queue   farm.Queue
	Nodes   farm.NodeStore
	Content farm.ContentStore
	Engine  Engine
	Code    Code
	Metrics *metrics.Farm
	Log     *slog.Logger
	// MaxAttempts bounds deliveries of a job whose compile keeps failing for
	// engine reasons (crash, timeout); then the failure is recorded on the
	// node and the job dropped. Default 3.
	MaxAttempts int
	// RetryDelay is the delay before the first retry, doubled each time.
	// Default 2s.
	RetryDelay time.Duration
	Now        func() time.Time
	// Collectors, when set, is told when a node's exported resources
	// change, to recompile the nodes that collect them.
	Collectors Collectors
	// Classifier, when set, classifies the node again for each compile, as
	// Puppet Server runs its classifier for each catalog: the compile uses
	// its answer (in the job's environment) and records it on the catalog,
	// so a code deploy compiles with current classes. A failure is retried
	// like an engine failure. Without it, a compile uses the classification
	// the intake stored at the node's check-in.
	Classifier Classifier
	// Queries, when set, records the PuppetDB queries of each catalog a
	// node is served, once per environment and query in this process
	// (recordQueries), for the query refresher.
	Queries QueryRecorder

	exportLists digestcache.Cache[[]ExportedResource]
	queryTexts  digestcache.Cache[struct{}]      // query texts known to be in the content store
	nodeInfos   digestcache.Cache[nodeinfo.Info] // decoded node information by digest; not to be changed

	// recordedQueries holds the (environment, query) pairs recorded in
	// Queries, by recordedKey.
	recordedQueries digestcache.Cache[struct{}]
}

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// Run starts workers goroutines and returns when ctx ends and they stopped.
func (p *Pool) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := p.Queue.Receive(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					p.log().Error("receive compile job", "err", err)
					if backoff.Sleep(ctx, time.Second) != nil {
						return
					}
					continue
				}
				p.Handle(ctx, d)
			}
		}()
	}
	wg.Wait()
}

// finishTimeout bounds finishing a delivery (ack, retry, recording a
// failure) after its compile.
var finishTimeout = 30 * time.Second

// Handle compiles one delivery and finishes it (ack or retry).
func (p *Pool) Handle(ctx context.Context, d farm.Delivery) {
	log := p.log().With("node", d.Certname, "seq", d.Seq, "code_id", d.CodeID, "attempt", d.Attempts)
	err := p.compile(ctx, d, log)
	// Finishing a delivery must survive the worker's context ending, and
	// gets its own time whatever the compile took.
	finishCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	switch {
	case finished(err):
		if err := p.Queue.Ack(finishCtx, d); err != nil {
			log.Error("ack compile job", "err", err)
		}
	case permanent(err):
		log.Warn("compile failed", "err", err)
		p.recordFailure(finishCtx, d, err, log)
		if err := p.Queue.Ack(finishCtx, d); err != nil {
			log.Error("ack failed compile job", "err", err)
		}
	default:
		if ctx.Err() != nil {
			// Shutting down: leave the job for the next start.
			if err := p.Queue.Retry(finishCtx, d, 0); err != nil {
				log.Error("return compile job at shutdown", "err", err)
			}
			return
		}
		max := p.MaxAttempts
		if max <= 0 {
			max = 3
		}
		if d.Attempts >= max {
			log.Error("compile failed for good", "err", err, "attempts", d.Attempts)
			p.recordFailure(finishCtx, d, fmt.Errorf("gave up after %d attempts: %w", d.Attempts, err), log)
			if err := p.Queue.Ack(finishCtx, d); err != nil {
				log.Error("ack failed compile job", "err", err)
			}
			return
		}
		delay := p.RetryDelay
		if delay <= 0 {
			delay = 2 * time.Second
		}
		delay <<= uint(d.Attempts - 1)
		log.Warn("compile will be retried", "err", err, "after", delay)
		if err := p.Queue.Retry(finishCtx, d, delay); err != nil {
			log.Error("retry compile job", "err", err)
		}
	}
}

var (
	errSuperseded = errors.New("superseded by a newer compile")
	errNeedStore  = errors.New("catalog bytes not stored yet")
)

// finished reports whether a compile's outcome finishes its job: a stored (or
// unchanged) catalog, or one a newer compile made moot.
func finished(err error) bool { return err == nil || errors.Is(err, errSuperseded) }

// permanent reports whether a compile failed in a way that delivering the
// job again cannot mend: the code does not compile, or the job or its
// inputs are invalid or gone.
func permanent(err error) bool {
	var cerr *CompileError
	return errors.As(err, &cerr) || errors.Is(err, farm.ErrInvalid) || errors.Is(err, farm.ErrNotFound)
}

func (p *Pool) compile(ctx context.Context, d farm.Delivery, log *slog.Logger) error {
	node, err := p.Nodes.GetNode(ctx, d.Certname)
	if err != nil {
		return fmt.Errorf("read node %s: %w", d.Certname, err)
	}
	if superseded(&node, d.Slot, d.Seq) {
		p.Metrics.ObserveCompile(metrics.CompileStale, 0)
		log.Info("compile skipped: a newer one exists")
		return errSuperseded
	}
	doc, err := p.Content.Get(ctx, farm.SpaceFacts, d.FactsDigest)
	if err != nil {
		return fmt.Errorf("read facts %s of %s: %w", d.FactsDigest, d.Certname, err)
	}
	fd, err := facts.Decode(d.Certname, doc)
	if err != nil {
		return err
	}
	info, infoDigest, err := p.nodeInfo(ctx, d, log)
	if err != nil {
		return err
	}
	envPath, err := p.Code.EnvironmentPath(ctx, d.CodeID)
	if err != nil {
		return fmt.Errorf("check out code %s: %w", d.CodeID, err)
	}
	start := p.now()
	res, err := p.compileWithExports(ctx, &node, Request{
		Certname: d.Certname, Environment: d.Environment, CodeID: d.CodeID,
		EnvironmentPath: envPath, Facts: fd.Values, Node: info,
	})
	dur := p.now().Sub(start)
	if err != nil {
		var cerr *CompileError
		if !errors.As(err, &cerr) {
			p.Metrics.ObserveCompile(metrics.CompileTransient, dur)
			return err
		}
		p.Metrics.ObserveCompile(metrics.CompileFailed, dur)
		public := *cerr
		if b, perr := p.Code.Publish(ctx, d.CodeID, []byte(cerr.Message)); perr == nil {
			public.Message = string(b)
		}
		if b, perr := p.Code.Publish(ctx, d.CodeID, []byte(cerr.File)); perr == nil {
			public.File = string(b)
		}
		return &public
	}
	static, err := p.Code.MakeStatic(ctx, res.Catalog, d.CodeID)
	if err != nil {
		return fmt.Errorf("make catalog of %s static: %w", d.Certname, err)
	}
	sealed, content, err := catalog.Seal(static, d.CodeID)
	if err != nil {
		return fmt.Errorf("seal catalog of %s: %w", d.Certname, err)
	}
	var readsDigest farm.Digest
	if res.Reads != nil {
		b, err := json.Marshal(res.Reads)
		if err != nil {
			return fmt.Errorf("encode fact reads of %s: %w", d.Certname, err)
		}
		if readsDigest, err = p.Content.Put(ctx, farm.SpaceCatalogs, b); err != nil {
			return fmt.Errorf("store fact reads of %s: %w", d.Certname, err)
		}
	}
	exportsDigest, exportTypes, collects, err := p.storeExports(ctx, d.Certname, d.CodeID, res)
	if err != nil {
		return err
	}
	queries, err := p.storeQueries(ctx, d.Certname, res.Reads)
	if err != nil {
		return err
	}
	c := compiled{
		Slot: d.Slot, Seq: d.Seq, CodeID: d.CodeID, FactsDigest: d.FactsDigest, NodeInfo: infoDigest,
		ReadsDigest: readsDigest, Content: content,
		ExportsDigest: exportsDigest, ExportTypes: exportTypes, Collects: collects, Queries: queries,
		At: p.now(), Duration: dur,
	}
	var existed []farm.Digest // catalog blobs stored before this compile put them
	if !node.Slot(d.Slot).Holds(content) {
		if c.Stored, existed, err = p.storeCatalog(ctx, sealed, node.CatalogBlobs()); err != nil {
			return err
		}
	}
	var out moved
	var before []farm.Digest // the catalog blobs of the record the move was written over
	move := func(n *farm.Node) (err error) {
		before = n.CatalogBlobs()
		out, err = movePointer(n, c)
		return err
	}
	written, err := p.Nodes.UpdateNode(ctx, d.Certname, move)
	if errors.Is(err, errNeedStore) {
		if c.Stored, existed, err = p.storeCatalog(ctx, sealed, before); err != nil {
			return err
		}
		written, err = p.Nodes.UpdateNode(ctx, d.Certname, move)
	}
	if errors.Is(err, farm.ErrConflict) {
		p.Metrics.ObserveCompile(metrics.CompileStale, dur)
		log.Info("compiled catalog discarded: a newer one was stored first")
		return errSuperseded
	}
	if err != nil {
		return fmt.Errorf("move catalog pointer of %s: %w", d.Certname, err)
	}
	p.retire(ctx, d.Certname, before, &written, existed, log)
	p.tellCollectors(ctx, d, out.ExportsChanged, log)
	p.recordQueries(ctx, d, c.Queries, log)
	if out.Unchanged {
		p.Metrics.ObserveCompile(metrics.CompileUnchanged, dur)
		log.Info("catalog recompiled unchanged", "duration", dur.Round(time.Millisecond), "reason", d.Reason)
		return nil
	}
	p.Metrics.ObserveCompile(metrics.CompileOK, dur)
	log.Info("catalog compiled", "duration", dur.Round(time.Millisecond), "bytes", len(sealed), "reason", d.Reason)
	return nil
}

// storeQueries writes the text of each PuppetDB query the compile made to
// the content store, where its QueryDigest names it, and returns those
// digests, sorted, for the node record (which keeps digests, not texts).
func (p *Pool) storeQueries(ctx context.Context, certname string, rec *facts.ReadRecord) ([]farm.Digest, error) {
	if rec == nil || len(rec.Queries) == 0 {
		return nil, nil
	}
	out := make([]farm.Digest, 0, len(rec.Queries))
	for _, q := range rec.Queries {
		out = append(out, q.QueryDigest)
		if _, ok := p.queryTexts.Load(q.QueryDigest); ok {
			continue
		}
		d, err := p.Content.Put(ctx, farm.SpaceCatalogs, q.Query)
		if err != nil {
			return nil, fmt.Errorf("store PuppetDB query of %s: %w", certname, err)
		}
		if d != q.QueryDigest {
			return nil, fmt.Errorf("PuppetDB query of %s: digest %s of its text is not its query digest %s: %w", certname, d, q.QueryDigest, farm.ErrInvalid)
		}
		p.queryTexts.Store(d, struct{}{})
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// nodeInfo returns the node information a job compiles with and its
// digest: the job's, classified again when the pool has a Classifier (the
// new answer stored when it differs).
func (p *Pool) nodeInfo(ctx context.Context, d farm.Delivery, log *slog.Logger) (nodeinfo.Info, farm.Digest, error) {
	info, err := p.loadNodeInfo(ctx, d.Certname, d.NodeInfo)
	if err != nil || p.Classifier == nil {
		return info, d.NodeInfo, err
	}
	c, err := p.Classifier.Classify(ctx, d.Certname)
	if err != nil {
		// The classifier may be back on the next delivery: retried, then
		// recorded on the node like an engine failure.
		return nodeinfo.Info{}, "", fmt.Errorf("Failed when searching for node %s: %w: %w", d.Certname, err, farm.ErrTransient)
	}
	if c.Environment != "" && c.Environment != d.Environment {
		log.Warn("the classifier puts the node in another environment; compiling this job in its own, the next check-in moves the node",
			"environment", d.Environment, "classifier_environment", c.Environment)
	}
	info = info.Classified(c)
	doc, digest, err := info.Encode()
	if err != nil {
		return nodeinfo.Info{}, "", fmt.Errorf("node %s: %w", d.Certname, err)
	}
	if digest != d.NodeInfo && doc != nil {
		if _, err := p.Content.Put(ctx, farm.SpaceNodeInfo, doc); err != nil {
			return nodeinfo.Info{}, "", fmt.Errorf("store node information of %s: %w", d.Certname, err)
		}
	}
	return info, digest, nil
}

// superseded reports whether a compile with sequence seq for a slot can no
// longer matter: the slot has a catalog at least as new, or a newer compile
// (or none: a release promoted or dropped the candidate) is requested.
func superseded(n *farm.Node, slot farm.Slot, seq uint64) bool {
	s := n.Slot(slot)
	if s.Catalog != nil && s.Catalog.Seq >= seq {
		return true
	}
	return s.Requested == nil || s.Requested.Seq > seq
}

// store writes the catalog and its gzip form to the content store and
// returns the digests of those that were stored already (see putCatalog).
func (p *Pool) store(ctx context.Context, catalog []byte) (farm.CatalogRef, []farm.Digest, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(catalog); err != nil {
		return farm.CatalogRef{}, nil, fmt.Errorf("gzip catalog: %w", err)
	}
	if err := zw.Close(); err != nil {
		return farm.CatalogRef{}, nil, fmt.Errorf("gzip catalog: %w", err)
	}
	var existed []farm.Digest
	d, was, err := p.putCatalog(ctx, catalog)
	if err != nil {
		return farm.CatalogRef{}, nil, fmt.Errorf("store catalog: %w", err)
	}
	if was {
		existed = append(existed, d)
	}
	gd, was, err := p.putCatalog(ctx, buf.Bytes())
	if err != nil {
		return farm.CatalogRef{}, nil, fmt.Errorf("store gzipped catalog: %w", err)
	}
	if was {
		existed = append(existed, gd)
	}
	slices.Sort(existed)
	return farm.CatalogRef{Digest: d, GzipDigest: gd}, existed, nil
}

func (p *Pool) recordFailure(ctx context.Context, d farm.Delivery, cause error, log *slog.Logger) {
	at := p.now()
	_, err := p.Nodes.UpdateNode(ctx, d.Certname, func(n *farm.Node) error {
		if st := n.Slot(d.Slot).Compile; st != nil && st.Seq > d.Seq {
			return nil
		}
		n.SetCompileStatus(d.Slot, farm.CompileStatus{Result: farm.ResultFailed, Error: cause.Error(), Seq: d.Seq, CodeID: d.CodeID, At: at})
		return nil
	})
	if err != nil {
		log.Error("record compile failure", "err", err)
	}
}

// tellCollectors has the nodes that collect the changed export types
// recompiled. A failure is logged: the collectors keep their catalogs, and
// their next compile for any reason collects the new exports.
func (p *Pool) tellCollectors(ctx context.Context, d farm.Delivery, types []string, log *slog.Logger) {
	if len(types) == 0 || p.Collectors == nil {
		return
	}
	n, err := p.Collectors.RecompileCollectors(ctx, d.Environment, d.Certname, types)
	if err != nil {
		log.Error("recompile collectors of changed exports", "types", types, "err", err)
		return
	}
	if n > 0 {
		log.Info("exports changed: collectors queued", "types", types, "collectors", n)
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}
