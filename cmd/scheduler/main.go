// Command scheduler is kube-scheduler with the nicaffinity plugin registered,
// run as a second scheduler: pods opt in with schedulerName.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(nicaffinity.Name, nicaffinity.New))
	command.RunE = withPodGroupCheck(command.RunE)
	os.Exit(cli.Run(command))
}
