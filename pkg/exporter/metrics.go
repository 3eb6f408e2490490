package exporter

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the exporter's Prometheus metrics, on their own registry.
type Metrics struct {
	Registry        *prometheus.Registry
	Publishes       *prometheus.CounterVec
	PublishDuration prometheus.Histogram
	SourceErrors    prometheus.Counter
	Verifications   *prometheus.CounterVec
	LastPublish     prometheus.Gauge
	// Blocked is 1 per other field manager while it owns the node's object
	// and the exporter does not write it.
	Blocked *prometheus.GaugeVec
}

// NewMetrics registers the exporter's metrics (and the Go and process collectors).
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nicaffinity_exporter_publishes_total",
			Help: "NodeResourceTopology syncs by result: written, unchanged, foreign (another writer owns the object: not written), error.",
		}, []string{"result"}),
		PublishDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nicaffinity_exporter_publish_duration_seconds",
			Help:    "Time to read the kubelet and write the NodeResourceTopology.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		SourceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nicaffinity_exporter_podresources_errors_total",
			Help: "Failed reads of the kubelet podresources API.",
		}),
		Verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nicaffinity_exporter_verifications_total",
			Help: "Pods whose real GPU-NIC placement was checked, by worst level and alignment.",
		}, []string{"level", "aligned"}),
		LastPublish: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nicaffinity_exporter_last_publish_timestamp_seconds",
			Help: "When the NodeResourceTopology was last written.",
		}),
		Blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nicaffinity_exporter_topology_foreign_manager",
			Help: "1 for each other field manager that owns this node's NodeResourceTopology, which the exporter therefore does not write.",
		}, []string{"manager"}),
	}
	m.Registry.MustRegister(m.Publishes, m.PublishDuration, m.SourceErrors, m.Verifications, m.LastPublish, m.Blocked,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
