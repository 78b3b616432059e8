// Command lsfarm is the Go half of localstack/run.sh:
//
//	lsfarm outputs FILE STACK        the stack's outputs (cdk deploy --outputs-file) as shell assignments
//	lsfarm check TIER TEMPLATE...    what in a synthesized template LocalStack of TIER (free|pro) cannot deploy
//	lsfarm compile --bootstrap BIN --urgent-queue-url U --bulk-queue-url B
//	                                 the compile function's real bootstrap under a local Lambda Runtime API,
//	                                 fed from both queues as the event source mappings would (LocalStack Free
//	                                 cannot run the container-image function; see localstack/README.md)
//
// AWS endpoints, region and credentials come from the standard AWS
// configuration (AWS_ENDPOINT_URL, AWS_REGION, ...), as in every main of
// this module.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/internal/lambdaruntime"
	"github.com/compilefarm/compilefarm/internal/procgroup"
	"github.com/compilefarm/compilefarm/localstack/cfnsupport"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "outputs":
		if len(os.Args) != 4 {
			usage()
		}
		err = outputs(os.Args[2], os.Args[3])
	case "check":
		if len(os.Args) < 4 {
			usage()
		}
		err = check(os.Args[2], os.Args[3:])
	case "compile":
		err = compile(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lsfarm:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: lsfarm outputs FILE STACK
       lsfarm check free|pro TEMPLATE...
       lsfarm compile --bootstrap BIN --urgent-queue-url URL --bulk-queue-url URL`)
	os.Exit(2)
}

// An output is one value run.sh needs, found among the stack's outputs by
// the words of its key (CDK adds a construct path and a hash to an output's
// ID unless it is defined on the stack itself).
type output struct {
	name     string         // the shell variable
	match    *regexp.Regexp // on the key, lower case, letters and digits only
	not      *regexp.Regexp // keys that match but mean something else
	optional bool
}

var wanted = []output{
	{name: "CF_BUCKET", match: regexp.MustCompile(`bucket(name)?`), not: regexp.MustCompile(`arn|asset|log`)},
	{name: "CF_NODES_TABLE", match: regexp.MustCompile(`nodes?table`), not: regexp.MustCompile(`index|arn`)},
	{name: "CF_NODE_INDEX_TABLE", match: regexp.MustCompile(`nodeindex`), not: regexp.MustCompile(`arn`)},
	{name: "CF_ENVIRONMENTS_TABLE", match: regexp.MustCompile(`environments?table`), not: regexp.MustCompile(`arn`)},
	{name: "CF_CA_TABLE", match: regexp.MustCompile(`catable`), not: regexp.MustCompile(`arn`)},
	{name: "CF_CA_KEY_SECRET", match: regexp.MustCompile(`ca(key)?secret|secret(name|id)?$`), optional: true},
	{name: "CF_CA_KMS_KEY", match: regexp.MustCompile(`ca(key)?kms(key)?|kmskey`), not: regexp.MustCompile(`alias`), optional: true},
	{name: "CF_URGENT_QUEUE_URL", match: regexp.MustCompile(`urgent.*url`), not: regexp.MustCompile(`dlq|deadletter`)},
	{name: "CF_BULK_QUEUE_URL", match: regexp.MustCompile(`bulk.*url`), not: regexp.MustCompile(`dlq|deadletter`)},
	{name: "CF_COMPILE_FUNCTION", match: regexp.MustCompile(`compilefunction(name)?$`), not: regexp.MustCompile(`arn`), optional: true},
	{name: "CF_LOAD_BALANCER_DNS", match: regexp.MustCompile(`(loadbalancer|nlb|lb).*dns|dnsname`), optional: true},
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]`)

// outputs prints NAME='value' lines for run.sh to eval.
func outputs(file, stack string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var all map[string]map[string]string
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	outs, ok := all[stack]
	if !ok {
		var names []string
		for n := range all {
			names = append(names, n)
		}
		return fmt.Errorf("%s has no stack %s (it has: %s)", file, stack, strings.Join(names, ", "))
	}
	keys := make([]string, 0, len(outs))
	for k := range outs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var missing []string
	for _, w := range wanted {
		var found []string
		for _, k := range keys {
			n := nonAlnum.ReplaceAllString(strings.ToLower(k), "")
			if w.match.MatchString(n) && (w.not == nil || !w.not.MatchString(n)) {
				found = append(found, k)
			}
		}
		switch {
		case len(found) == 1:
			fmt.Printf("%s=%s\n", w.name, shellQuote(outs[found[0]]))
		case len(found) > 1:
			return fmt.Errorf("%s: outputs %s all look like %s", file, strings.Join(found, ", "), w.name)
		case !w.optional:
			missing = append(missing, w.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: no output of stack %s for %s (its outputs: %s)",
			file, stack, strings.Join(missing, ", "), strings.Join(keys, ", "))
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// check prints the findings for each template; it fails when one stops a
// deployment.
func check(tierName string, templates []string) error {
	tier, err := cfnsupport.ParseTier(tierName)
	if err != nil {
		return err
	}
	errs := 0
	for _, p := range templates {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fs, err := cfnsupport.Check(tier, b)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, f := range fs {
			fmt.Printf("%s: %s\n", p, f)
		}
		errs += len(cfnsupport.Errors(fs))
	}
	if errs > 0 {
		return fmt.Errorf("%d resource(s) that %s cannot deploy (see localstack/README.md)", errs, tier)
	}
	return nil
}

// compile runs the compile bootstrap until SIGINT or SIGTERM.
func compile(args []string) error {
	fs := flag.NewFlagSet("compile", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "the compile function's bootstrap, built for this host (go build -o BIN ./functions/compile)")
	urgent := fs.String("urgent-queue-url", "", "SQS urgent compile queue")
	bulk := fs.String("bulk-queue-url", "", "SQS bulk compile queue")
	timeout := fs.Duration("timeout", 3*time.Minute, "each invocation's deadline (the function's timeout)")
	wait := fs.Int("wait", 5, "long-poll seconds per receive")
	fs.Parse(args)
	if *bootstrap == "" || *urgent == "" || *bulk == "" {
		fs.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	client := sqs.NewFromConfig(cfg)
	// The bootstrap reads the COMPILEFARM_* settings and the AWS settings
	// from the environment this process was given (lambdaruntime.Start
	// passes it on).
	rt, err := lambdaruntime.Start(*bootstrap, nil, *timeout)
	if err != nil {
		return err
	}
	defer func() {
		rt.Stop()
		if out := rt.Output(); out != "" {
			fmt.Fprintf(os.Stderr, "--- compile function output (tail) ---\n%s\n", procgroup.Tail(out, 60))
		}
	}()
	var pollers []*lambdaruntime.Poller
	for _, u := range []string{*urgent, *bulk} {
		attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			return fmt.Errorf("queue %s: %w", u, err)
		}
		pollers = append(pollers, &lambdaruntime.Poller{SQS: client, QueueURL: u, Region: cfg.Region,
			QueueARN: attrs.Attributes[string(types.QueueAttributeNameQueueArn)], Runtime: rt})
	}
	fmt.Printf("lsfarm compile: polling %s and %s (Ctrl-C stops)\n", *urgent, *bulk)
	for ctx.Err() == nil {
		for _, p := range pollers {
			n, failed, err := p.PollOnce(ctx, int32(*wait))
			switch {
			case err != nil && ctx.Err() == nil:
				fmt.Fprintf(os.Stderr, "lsfarm compile: %v\n%s", err, procgroup.Tail(rt.Output(), 20))
				time.Sleep(time.Second)
			case n > 0:
				fmt.Printf("%s lsfarm compile: %d job(s) from %s, %d failed\n", time.Now().Format(time.TimeOnly), n, p.QueueARN, failed)
			}
		}
	}
	return nil
}
