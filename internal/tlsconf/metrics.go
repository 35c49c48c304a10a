package tlsconf

import (
	"github.com/prometheus/client_golang/prometheus"
)

var expiryDesc = prometheus.NewDesc("netsy_tls_certificate_expiry_seconds",
	"Unix time at which the certificate in the file expires (for a CA bundle, its first certificate to expire).",
	[]string{"file"}, nil)

// NewExpiryCollector reports netsy_tls_certificate_expiry_seconds{file}
// for each certificate or CA file, read at every scrape so the metric
// follows rotation. Empty and repeated names are skipped, so the flags of
// both ports can be passed as they are; a file that cannot be read or
// parsed is left out of that scrape (the reloaders log why).
func NewExpiryCollector(files ...string) prometheus.Collector {
	seen := map[string]bool{}
	var fs []string
	for _, f := range files {
		if f != "" && !seen[f] {
			seen[f] = true
			fs = append(fs, f)
		}
	}
	return &expiryCollector{files: fs}
}

type expiryCollector struct{ files []string }

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range c.files {
		certs, err := readCerts(f, false)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue,
			float64(earliestExpiry(certs).Unix()), f)
	}
}
