// Command infra is the compilefarm's AWS CDK app: one stack per stage,
// compilefarm-<stage>, configured from CDK context (see README.md).
//
//	cdk synth -c stage=dev
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/infra/farmstack"
)

func main() {
	os.Exit(run())
}

func run() int {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	cfg, err := farmstack.ConfigFromContext(app)
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		return 2
	}
	// Paths are relative to infra/, where cdk runs `go run .`.
	farmstack.NewFarmStack(app, farmstack.Props{Config: cfg, RepoRoot: "..", ScalerAssetDir: "assets/scaler"})
	app.Synth(nil)
	return 0
}
