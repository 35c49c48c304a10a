package clock

import (
	"context"
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
