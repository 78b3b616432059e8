package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// outcome is how a node's run ended.
type outcome struct {
	state    string // JobNodeFinished, JobNodeFailed or JobNodeUnreachable
	exitCode *int
	status   string
	uuid     string
	err      string
}

func failed(format string, args ...any) outcome {
	return outcome{state: farm.JobNodeFailed, err: fmt.Sprintf(format, args...)}
}

// spawn runs job in the background: the queued nodes are run, and the
// recovering ones (running when an earlier runner stopped) are asked for
// their result.
func (r *Runner) spawn(job farm.RunJob, queued []string, recovering []farm.RunJobNode) {
	r.setActive(job.ID, true)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.setActive(job.ID, false)
		r.runJob(r.ctx, job, queued, recovering)
	}()
}

// runJob runs the nodes, at most job.Concurrency at a time, then records
// the job's end; it returns early, leaving the job running, when ctx ends.
func (r *Runner) runJob(ctx context.Context, job farm.RunJob, queued []string, recovering []farm.RunJobNode) {
	beatDone := make(chan struct{})
	defer close(beatDone)
	go r.heartbeat(ctx, job.ID, beatDone)

	sem := make(chan struct{}, max(job.Concurrency, 1))
	var wg sync.WaitGroup
	each := func(fn func()) bool {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn()
		}()
		return true
	}
	for _, n := range recovering {
		if !each(func() { r.recoverNode(ctx, job, n) }) {
			break
		}
	}
	for _, node := range queued {
		if ctx.Err() != nil || !each(func() { r.runNode(ctx, job, node) }) {
			break
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		r.log.Info("job left running: the runner stopped; a runner that starts resumes it", "job", job.ID)
		return
	}
	r.finish(ctx, job.ID)
}

// heartbeat touches the job's record until done, so that no other runner
// takes it for one whose runner died (Resume).
func (r *Runner) heartbeat(ctx context.Context, id string, done <-chan struct{}) {
	t := time.NewTicker(r.cfg.StaleAfter / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
			_, err := r.cfg.Store.UpdateJob(ctx, id, func(j *farm.RunJob) error {
				j.Updated = r.now()
				return nil
			})
			if err != nil && ctx.Err() == nil {
				r.log.Warn("touch job record", "job", id, "err", err)
			}
		}
	}
}

func (r *Runner) now() time.Time { return r.cfg.Now().UTC() }

// runNode runs Puppet on node and records how the run ended.
func (r *Runner) runNode(ctx context.Context, job farm.RunJob, node string) {
	log := r.log.With("job", job.ID, "node", node)
	up, err := r.cfg.Presence.Connected(ctx, agentURI(node))
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		r.record(ctx, log, job.ID, node, failed("look up the node's PXP agent: %v", err))
		return
	case !up:
		r.record(ctx, log, job.ID, node, outcome{state: farm.JobNodeUnreachable,
			err: fmt.Sprintf("no PXP agent is connected as %s (is pxp-agent running on the node, with the farm's broker in its broker-ws-uris?)", agentURI(node))})
		return
	}
	me := r.client()
	tx := newID()
	msg, err := request(me.URI(), node, typeNonBlockingRequest, nonBlockingRequest{
		TransactionID: tx, NotifyOutcome: true, Module: puppetModule, Action: "run",
		Params: runParams{Env: []string{}, Flags: runFlags(job.Noop), Job: job.ID},
	}, r.now().Add(r.cfg.RequestTTL))
	if err != nil {
		r.record(ctx, log, job.ID, node, failed("%v", err))
		return
	}
	c := r.register(tx, msg.ID)
	defer r.unregister(c)
	// Running (with the transaction) before the request leaves: a runner
	// that stops from here on finds which transaction to ask the agent about.
	r.set(ctx, log, job.ID, node, func(n *farm.RunJobNode) {
		*n = farm.RunJobNode{Job: n.Job, Node: n.Node, State: farm.JobNodeRunning, TransactionID: tx}
	})
	if err := me.Send(ctx, msg); err != nil {
		if ctx.Err() == nil {
			r.record(ctx, log, job.ID, node, failed("send the run request through the broker: %v", err))
		}
		return
	}
	log.Debug("run requested", "transaction_id", tx)
	out, ok := r.await(ctx, log, job, node, c)
	if ok {
		r.record(ctx, log, job.ID, node, out)
	}
}

// await waits for the end of the run that c requested: the agent's final
// answer, an error, or job.Timeout. ok is false when ctx ended first.
func (r *Runner) await(ctx context.Context, log *slog.Logger, job farm.RunJob, node string, c *call) (out outcome, ok bool) {
	timer := time.NewTimer(job.Timeout)
	defer timer.Stop()
	provisional := false
	for {
		select {
		case <-ctx.Done():
			return outcome{}, false
		case <-timer.C:
			if !provisional {
				return failed("timed out after %v: the agent never acknowledged the run request", job.Timeout), true
			}
			// The final answer may be lost (the agent reconnected, a
			// broker task restarted): ask the agent how the run ended.
			return r.afterTimeout(ctx, log, job, node, c)
		case m := <-c.answers:
			if m.MessageType == typeProvisional {
				provisional = true
				log.Debug("run started", "transaction_id", c.tx)
				continue
			}
			if out, done := r.interpret(m); done {
				return out, true
			}
		}
	}
}

// interpret reads an answer to a run request; done is false for a message
// that does not end the run.
func (r *Runner) interpret(m *message.Message) (outcome, bool) {
	var a answer
	json.Unmarshal(m.Data, &a) // Deliver checked it is JSON
	switch m.MessageType {
	case typeNonBlockingResponse:
		var res runResult
		if err := json.Unmarshal(a.Results, &res); err != nil {
			return failed("the agent's answer holds no run result: %v", err), true
		}
		return outcomeOf(res), true
	case typeRPCError:
		return failed("the agent could not run Puppet: %s", a.Description), true
	case typeError:
		if notConnected(a.Description) {
			return outcome{state: farm.JobNodeUnreachable, err: "the broker could not deliver the run request: " + a.Description}, true
		}
		return failed("the broker refused the run request: %s", a.Description), true
	case typeTTLExpired:
		return failed("the run request expired before it reached the agent (ttl_expired): the agent may have disconnected"), true
	}
	return outcome{}, false
}

// outcomeOf reads pxp-module-puppet's result: exit code 0 or 2 (changes
// applied) with a status other than failed is finished.
func outcomeOf(res runResult) outcome {
	out := outcome{exitCode: res.ExitCode, status: known(res.Status), uuid: known(res.TransactionUUID)}
	switch {
	case res.ExitCode == nil:
		out.state, out.err = farm.JobNodeFailed, "the agent's answer has no exit code"
	case (*res.ExitCode == 0 || *res.ExitCode == 2) && res.Status != "failed":
		out.state = farm.JobNodeFinished
	default:
		out.state = farm.JobNodeFailed
		switch {
		case res.ErrorType != "" || res.Error != "":
			out.err = res.ErrorType + ": " + res.Error
		case res.Status == "failed":
			out.err = "the run's report says failed"
		default:
			out.err = fmt.Sprintf("puppet exited with code %d", *res.ExitCode)
		}
	}
	return out
}

// known maps pxp-module-puppet's "unknown" placeholder to "".
func known(s string) string {
	if s == "unknown" {
		return ""
	}
	return s
}

// afterTimeout asks the agent about a run that gave no final answer in
// time; the final answer counts if it comes meanwhile.
func (r *Runner) afterTimeout(ctx context.Context, log *slog.Logger, job farm.RunJob, node string, c *call) (outcome, bool) {
	st, final, err := r.queryStatus(ctx, node, c)
	switch {
	case ctx.Err() != nil:
		return outcome{}, false
	case final != nil:
		if out, done := r.interpret(final); done {
			return out, true
		}
	case err != nil:
		return failed("timed out after %v; asking the agent about the run failed: %v", job.Timeout, err), true
	}
	if out, ok := statusOutcome(st); ok {
		log.Info("run result learnt from a status query after the timeout", "transaction_id", c.tx)
		return out, true
	}
	if st.Status == "running" {
		return failed("timed out after %v: the agent says the run is still going", job.Timeout), true
	}
	return failed("timed out after %v: the agent does not know how the run ended (status %q)", job.Timeout, st.Status), true
}

// statusOutcome reads a status query's answer about an ended run.
func statusOutcome(st statusResult) (outcome, bool) {
	if st.Status != "success" && st.Status != "failure" {
		return outcome{}, false
	}
	var res runResult
	if err := json.Unmarshal([]byte(st.Stdout), &res); err != nil || res.ExitCode == nil {
		res = runResult{ExitCode: st.ExitCode}
		if res.ExitCode == nil {
			return failed("the agent says the run ended (%s) but kept no result", st.Status), true
		}
	}
	return outcomeOf(res), true
}

// queryStatus asks node's agent about c's transaction (PXP's status query,
// a blocking request) and waits StatusWait for the answer. final is c's
// own final answer when that arrives first.
func (r *Runner) queryStatus(ctx context.Context, node string, c *call) (st statusResult, final *message.Message, err error) {
	tx := newID()
	q := statusQuery{TransactionID: tx, Module: "status", Action: "query"}
	q.Params.TransactionID = c.tx
	me := r.client()
	msg, err := request(me.URI(), node, typeBlockingRequest, q, r.now().Add(r.cfg.RequestTTL))
	if err != nil {
		return st, nil, err
	}
	sc := r.register(tx, msg.ID)
	defer r.unregister(sc)
	if err := me.Send(ctx, msg); err != nil {
		return st, nil, fmt.Errorf("send the status query: %w", err)
	}
	timer := time.NewTimer(r.cfg.StatusWait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return st, nil, ctx.Err()
		case <-timer.C:
			return st, nil, fmt.Errorf("no answer to the status query in %v", r.cfg.StatusWait)
		case m := <-c.answers:
			if m.MessageType != typeProvisional {
				return st, m, nil
			}
		case m := <-sc.answers:
			var a answer
			json.Unmarshal(m.Data, &a)
			switch m.MessageType {
			case typeBlockingResponse:
				if err := json.Unmarshal(a.Results, &st); err != nil {
					return st, nil, fmt.Errorf("the status answer holds no results: %v", err)
				}
				return st, nil, nil
			case typeRPCError, typeError:
				return st, nil, fmt.Errorf("status query refused: %s", a.Description)
			case typeTTLExpired:
				return st, nil, fmt.Errorf("the status query expired before it reached the agent")
			}
		}
	}
}

// recoverNode finishes a node that was running when an earlier runner
// stopped: the agent's answer to a status query says how the run ended
// (the final answer went to the runner that sent the request); a run
// still going is asked about again until job.Timeout from when it was
// sent.
func (r *Runner) recoverNode(ctx context.Context, job farm.RunJob, n farm.RunJobNode) {
	log := r.log.With("job", job.ID, "node", n.Node)
	if n.TransactionID == "" {
		r.runNode(ctx, job, n.Node)
		return
	}
	// The final answer reaches this runner if it has the old one's URI.
	c := r.register(n.TransactionID, "")
	defer r.unregister(c)
	for {
		st, final, err := r.queryStatus(ctx, n.Node, c)
		if ctx.Err() != nil {
			return
		}
		if final != nil {
			if out, done := r.interpret(final); done {
				r.record(ctx, log, job.ID, n.Node, out)
				return
			}
			continue
		}
		if err != nil {
			r.record(ctx, log, job.ID, n.Node, failed("runner restarted; result unknown: %v", err))
			return
		}
		if out, ok := statusOutcome(st); ok {
			r.record(ctx, log, job.ID, n.Node, out)
			return
		}
		if st.Status != "running" {
			r.record(ctx, log, job.ID, n.Node, failed("runner restarted; result unknown (the agent says %q)", st.Status))
			return
		}
		if r.now().Sub(n.Updated) >= job.Timeout {
			r.record(ctx, log, job.ID, n.Node, failed("timed out after %v (runner restarted): the agent says the run is still going", job.Timeout))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.StatusWait):
		}
	}
}

// record stores a node's final state, with the link to its run's report.
func (r *Runner) record(ctx context.Context, log *slog.Logger, id, node string, out outcome) {
	link := r.reportLink(ctx, log, node, out.uuid)
	r.set(ctx, log, id, node, func(n *farm.RunJobNode) {
		n.State, n.ExitCode, n.Status, n.TransactionUUID, n.Error = out.state, out.exitCode, out.status, out.uuid, out.err
		n.ReportURL = link
	})
	attrs := []any{"state", out.state, "status", out.status, "transaction_uuid", out.uuid}
	if link != "" {
		attrs = append(attrs, "report", link)
	}
	if out.exitCode != nil {
		attrs = append(attrs, "exitcode", *out.exitCode)
	}
	if out.err != "" {
		attrs = append(attrs, "error", out.err)
	}
	log.Info("node run ended", attrs...)
}

// reportLink is the operator API's path to the stored report of node's
// run uuid: "" without Config.Reports or a uuid, when the farm kept only
// the run's summary, or when the report does not arrive.
//
// The agent sends its report before it exits, so before pxp-module-puppet
// answers, and the front door records the summary and stores a report it
// keeps before it answers the agent: the first read normally finds the
// run's report. A node whose latest report is another run's (this run's
// is late) is read again, reportTries reads in all, reportPause apart.
func (r *Runner) reportLink(ctx context.Context, log *slog.Logger, node, uuid string) string {
	if r.cfg.Reports == nil || uuid == "" {
		return ""
	}
	log = log.With("transaction_uuid", uuid)
	var lastErr error
	for try := 1; ; try++ {
		n, err := r.cfg.Reports.GetNode(ctx, node)
		lastErr = err
		switch {
		case ctx.Err() != nil:
			return ""
		case errors.Is(err, farm.ErrNotFound):
			log.Debug("no report link: the farm has no record of the node")
			return ""
		case err != nil:
			// read again: the node store may be throttled
		case n.Report != nil && n.Report.TransactionUUID == uuid:
			if n.Report.Digest == "" {
				log.Debug("no report link: the farm kept only a summary of the run's report (see --full-report-every)")
				return ""
			}
			return ReportPath + string(n.Report.Digest)
		}
		if try >= r.reportTries {
			break
		}
		if backoff.Sleep(ctx, r.reportPause) != nil {
			return ""
		}
	}
	if lastErr != nil {
		log.Warn("no report link: read the node's report summary", "err", lastErr)
	} else {
		log.Debug("no report link: the run's report has not reached the farm")
	}
	return ""
}

// set changes a node's record with fill, and the job's counts with its
// state.
func (r *Runner) set(ctx context.Context, log *slog.Logger, id, node string, fill func(*farm.RunJobNode)) {
	var from, to string
	_, err := r.cfg.Store.UpdateJobNode(ctx, id, node, func(n *farm.RunJobNode) error {
		from = n.State
		fill(n)
		n.Updated = r.now()
		to = n.State
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			log.Error("record node state", "err", err)
		}
		return
	}
	if from == to {
		return
	}
	_, err = r.cfg.Store.UpdateJob(ctx, id, func(j *farm.RunJob) error {
		counts := make(map[string]int, len(j.Counts)+1)
		for k, v := range j.Counts {
			counts[k] = v
		}
		if counts[from]--; counts[from] <= 0 {
			delete(counts, from)
		}
		counts[to]++
		j.Counts, j.Updated = counts, r.now()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		log.Error("record job counts", "err", err)
	}
}

// finish counts the job's nodes from their records (a count a failed
// write left wrong is mended) and records how the job ended.
func (r *Runner) finish(ctx context.Context, id string) {
	counts := map[string]int{}
	total := 0
	q := farm.RunJobNodeQuery{Job: id, Limit: farm.MaxNodePage}
	for {
		page, err := r.cfg.Store.ListJobNodes(ctx, q)
		if err != nil {
			r.log.Error("count the job's nodes", "job", id, "err", err)
			return
		}
		for _, n := range page.Nodes {
			counts[n.State]++
			total++
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	job, err := r.cfg.Store.UpdateJob(ctx, id, func(j *farm.RunJob) error {
		j.Counts, j.Total, j.Updated = counts, total, r.now()
		j.State = endState(counts)
		return nil
	})
	if err != nil {
		r.log.Error("record the job's end", "job", id, "err", err)
		return
	}
	r.log.Info("job ended", "job", id, "state", job.State, "nodes", total,
		"finished", counts[farm.JobNodeFinished], "failed", counts[farm.JobNodeFailed], "unreachable", counts[farm.JobNodeUnreachable])
}

// endState is a job's state once no node is queued or running.
func endState(counts map[string]int) string {
	if counts[farm.JobNodeFailed]+counts[farm.JobNodeUnreachable]+counts[farm.JobNodeQueued]+counts[farm.JobNodeRunning] > 0 {
		return farm.JobFailed
	}
	return farm.JobFinished
}
