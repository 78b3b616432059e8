package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// pluginsyncPaths are the pluginsync requests of a run, in the recorded
// order (a run of puppet agent 7.23.0): the plugins mount without
// recursion (the environment check), pluginfacts, plugins; then locales,
// which agents sync only with disable_i18n=false.
func pluginsyncPaths(env string, locales bool) []string {
	e := "&environment=" + url.QueryEscape(env)
	const ignore = "&ignore=.svn&ignore=CVS&ignore=.git&ignore=.hg"
	p := []string{
		"/file_metadatas/plugins?recurse=false&links=manage&checksum_type=sha256&source_permissions=ignore" + e,
		"/file_metadatas/pluginfacts?recurse=true&max_files=-1" + ignore + "&links=follow&checksum_type=sha256&source_permissions=use" + e,
		"/file_metadatas/plugins?recurse=true&max_files=-1" + ignore + "&links=follow&checksum_type=sha256&source_permissions=ignore" + e,
	}
	if locales {
		p = append(p, "/file_metadatas/locales?recurse=true&max_files=-1"+ignore+"&ignore=%2A.pot&ignore=config.yaml&links=follow&checksum_type=sha256&source_permissions=ignore"+e)
	}
	return p
}

// newUUID is a random (version 4) UUID, as the agent makes for each run's
// transaction_uuid.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// runFacts is the facts document agent a uploads at now, in its run
// number run of this invocation (0, 1, ...): its run number for the facts
// goes on from the last invocation with the same --state (s.firstRun).
func (s *sim) runFacts(a *agent, run int, now time.Time) (string, error) {
	return s.facts.document(a.rename, s.firstRun+run, now, s.cfg.runinterval)
}

// runAgent is one run of agent a, as a real agent does it (see the package
// doc): node, pluginsync, catalog with fresh facts, file metadata for the
// catalog's sources, report; on one new TLS connection. A request that
// fails for good fails the run; the run goes on as the agent's would (a
// failed catalog request still sends a failed report).
func (s *sim) runAgent(ctx context.Context, a *agent, live *roundStats) *runRecord {
	rec := &runRecord{start: time.Now()}
	run := a.runs
	a.runs++
	c := s.newRunConn(a, rec, live)
	defer c.close()
	env := s.cfg.env
	envQ := url.QueryEscape(env)
	txn := newUUID()
	name := url.PathEscape(a.name)

	if s.cfg.nodeRequest == "always" || s.cfg.nodeRequest == "first" && run == 0 {
		c.do(ctx, kindNode, "GET", "/node/"+name+"?environment="+envQ+"&configured_environment="+envQ+"&transaction_uuid="+txn,
			agentwire.AcceptJSON, "", nil)
	}
	syncStart := time.Now()
	for _, p := range s.pluginsync {
		c.do(ctx, kindFileMetadatas, "GET", p, agentwire.AcceptJSON, "", nil)
	}
	pluginSync := time.Since(syncStart)

	doc, err := s.runFacts(a, run, time.Now())
	if err != nil {
		rec.fail(kindCatalog, err)
		rec.end = time.Now()
		return rec
	}
	body := s.facts.catalogBody(doc, env, txn)
	rec.catalogReqBytes = len(body)
	catStart := time.Now()
	var cat *servedCatalog
	ans, catErr := c.do(ctx, kindCatalog, "POST", "/catalog/"+name+"?environment="+envQ, agentwire.AcceptCatalog,
		"application/x-www-form-urlencoded", body)
	catalogTime := time.Since(catStart)
	if catErr == nil {
		rec.catalogWire = len(ans.body)
		if cat, rec.catalogJSON, catErr = decodeCatalog(ans.body, ans.gzip, a.name, env); catErr != nil {
			catErr = fmt.Errorf("catalog: %w", catErr)
			rec.fail(kindCatalog, catErr)
		}
	}
	if cat != nil {
		for _, f := range cat.sourcedFiles(env, s.cfg.askInlined, s.cfg.maxFiles) {
			c.do(ctx, kindFileMetadata, "GET", f.path, agentwire.AcceptJSON, "", nil)
		}
	}
	rep, err := s.report.build(&reportRun{node: a.name, env: env, txn: txn, start: rec.start, end: time.Now(),
		pluginSync: pluginSync, catalogTime: catalogTime, cat: cat, catalogErr: catErr})
	if err != nil {
		rec.fail(kindReport, err)
	} else {
		rec.reportBytes = len(rep)
		c.do(ctx, kindReport, "PUT", "/report/"+name+"?environment="+envQ, agentwire.AcceptJSON, "application/json", rep)
	}
	rec.end = time.Now()
	rec.interrupted = ctx.Err() != nil
	if rec.err != nil {
		rec.err = fmt.Errorf("%s: %w", a.name, rec.err)
	}
	return rec
}
