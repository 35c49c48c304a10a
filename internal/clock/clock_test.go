package clock

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestFakeTimerFiresOnlyWhenDue(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-tm.C():
		if !got.Equal(time.Unix(1001, 0)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("timer did not fire")
	}
	if f.Pending() != 0 {
		t.Fatalf("pending = %d after firing", f.Pending())
	}
}

func TestFakeTickerAndStop(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	f.Advance(time.Second)
	<-tk.C()
	f.Advance(time.Second)
	<-tk.C()
	tk.Stop()
	f.Advance(5 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("stopped ticker fired")
	default:
	}
}

func TestFakeSleepAndBlockUntil(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- f.Sleep(context.Background(), time.Minute) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFakeTimerResetAndStopReportState(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Reset(2 * time.Second) {
		t.Fatal("Reset of an armed timer should report true")
	}
	f.Advance(time.Second)
	select {
	case <-tm.C():
		t.Fatal("reset timer fired at the old deadline")
	default:
	}
	f.Advance(time.Second)
	<-tm.C()
	if tm.Stop() {
		t.Fatal("Stop of a fired timer should report false")
	}
}

// A step of the wall clock moves Wall alone: Now, Since and timers, which
// every lease and deadline is measured with, do not see it.
func TestFakeStepWallMovesWallOnly(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	f.StepWall(-30 * time.Second)
	if got := f.Wall(); !got.Equal(start.Add(-30 * time.Second)) {
		t.Fatalf("Wall after a step back of 30 s = %v", got)
	}
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("Now moved with the wall step: %v", got)
	}
	f.StepWall(60 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("a wall step fired a timer")
	default:
	}
	f.Advance(time.Second)
	if got := f.Since(start); got != time.Second {
		t.Fatalf("Since = %v, want 1s", got)
	}
	if got := f.Wall(); !got.Equal(start.Add(31 * time.Second)) {
		t.Fatalf("Wall = %v, want start+31s (steps and Advance add up)", got)
	}
	select {
	case <-tm.C():
	default:
		t.Fatal("timer did not fire on Advance")
	}
}

// The real clock's Now keeps Go's monotonic reading (what makes durations
// immune to steps) and Wall carries none (so nobody measures with it by
// accident).
func TestRealReadings(t *testing.T) {
	c := Real()
	if s := c.Now().String(); !strings.Contains(s, "m=") {
		t.Fatalf("Now has no monotonic reading: %s", s)
	}
	if s := c.Wall().String(); strings.Contains(s, "m=") {
		t.Fatalf("Wall has a monotonic reading: %s", s)
	}
}
