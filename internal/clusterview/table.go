package clusterview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints v for people: a header block with the roles and
// terms, one row per node (ordered by node id, the Elector and the Primary
// marked in the ROLE column, its peer address and client URLs last), and
// with events the event log, oldest first.
// A "-" stands for a value nobody reported.
func WriteTable(out io.Writer, v View, events bool) error {
	w := &errWriter{w: out}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster:\t%s\n", dash(v.ClusterID))
	fmt.Fprintf(tw, "Elector:\t%s\n", describe(v.Elector, "none known"))
	fmt.Fprintf(tw, "Elector term:\t%d\n", v.ElectorTerm)
	fmt.Fprintf(tw, "Primary:\t%s\n", describe(v.Primary, "none elected"))
	fmt.Fprintf(tw, "Primary term:\t%d\n", v.PrimaryTerm)
	fmt.Fprintf(tw, "Nodes registered:\t%d\n", v.RegisteredNodes)
	if rp := v.Replication; rp != nil {
		fmt.Fprintf(tw, "Quorum:\t%s\n", quorumLine(rp))
		fmt.Fprintf(tw, "Fallbacks:\t%d\n", rp.Fallbacks)
	}
	if rs := v.Restore; rs != nil {
		fmt.Fprintf(tw, "Restorable from:\trevision %d (%s)\n", rs.OldestRevision, dash(rs.OldestTime))
	}
	if v.ViaNode != "" {
		fmt.Fprintf(tw, "Via node:\t%s\n", v.ViaNode)
	}
	if v.Note != "" {
		fmt.Fprintf(tw, "Note:\t%s\n", v.Note)
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(tw, "NODE\tMEMBER ID\tROLE\tHEALTH\tSTATE\tLATEST REV\tCOMMITTED REV\tLAG\tREPLICATION\tLAST HEARTBEAT\tDEGRADED FOR\tPEER ADDR\tCLIENT URLS")
	for _, r := range v.Nodes {
		latest, committed := "-", "-"
		if r.known {
			latest, committed = strconv.FormatInt(r.LatestRevision, 10), strconv.FormatInt(r.CommittedRevision, 10)
		}
		lag := "-"
		if r.Lag != nil {
			lag = strconv.FormatInt(*r.Lag, 10)
		}
		heartbeat := r.LastHeartbeat
		if r.Source == SourceSelf {
			heartbeat = "(self-reported)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.NodeID, dash(r.MemberID), role(r), r.Health, r.PrimaryState, latest, committed, lag,
			replication(r.Replica), dash(heartbeat), dash(r.DegradedFor), dash(r.PeerAddr), dash(strings.Join(r.ClientURLs, ",")))
	}
	if len(v.Nodes) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	tw.Flush()
	for _, r := range v.Nodes {
		if r.DeregistrationWait != "" {
			fmt.Fprintf(w, "%s stays counted past the deregistration timeout: %s\n", r.NodeID, r.DeregistrationWait)
		}
	}

	if !events {
		return w.err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "EVENTS")
	if len(v.Events) == 0 {
		fmt.Fprintln(w, "(none)")
		return w.err
	}
	fmt.Fprintln(tw, "TIME\tKIND\tNODE\tELECTOR TERM\tPRIMARY TERM\tREVISION\tREPORTER\tDETAIL")
	for _, e := range v.Events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n",
			e.Time, e.Kind, dash(e.Node), e.ElectorTerm, e.PrimaryTerm, e.Revision, dash(e.Reporter), dash(e.Detail))
	}
	tw.Flush()
	return w.err
}

// quorumLine says how writes are acknowledged.
func quorumLine(rp *ReplicationView) string {
	var mode string
	switch {
	case rp.Quorum == 0:
		mode = "0 (object storage)"
	case rp.Quorum > 0:
		mode = fmt.Sprintf("%d (static)", rp.Quorum)
	default:
		mode = "-1 (majority)"
	}
	if rp.Quorum != 0 {
		mode += fmt.Sprintf(", %d replica receipts per write", rp.ReplicasNeeded)
	}
	switch {
	case rp.Quorum == 0:
	case rp.Fallback:
		mode += "; falling back to object storage: " + rp.FallbackReason
	case rp.ReplicasNeeded == 0:
		mode += "; alone: local fsync"
	default:
		mode += "; acknowledged by replicas"
	}
	return mode
}

// replication describes a replica as the Primary sees it: lag in entries
// and time, and whether it counts toward the quorum.
func replication(r *ReplicaView) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%d behind", r.LagEntries)
	if r.LagEntries > 0 {
		s += fmt.Sprintf(" (%s)", FormatAge(time.Duration(r.LagMS)*time.Millisecond))
	}
	if r.Counted {
		return s + ", counted"
	}
	return s + ", not counted: " + r.NotCounted
}

// errWriter keeps the first write error, so the many prints above need
// one check.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// describe prints a role holder as "n1 (member 8e9e05c52164694d, 10.0.0.1:2380)".
func describe(r *NodeRef, none string) string {
	if r == nil {
		return none
	}
	var extra []string
	if r.MemberID != "" && r.MemberID != "0" {
		extra = append(extra, "member "+r.MemberID)
	}
	if r.PeerAddr != "" {
		extra = append(extra, r.PeerAddr)
	}
	if len(extra) == 0 {
		return r.NodeID
	}
	return r.NodeID + " (" + strings.Join(extra, ", ") + ")"
}

func role(r NodeRow) string {
	switch {
	case r.Elector && r.Primary:
		return "Elector,Primary"
	case r.Elector:
		return "Elector"
	case r.Primary:
		return "Primary"
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
