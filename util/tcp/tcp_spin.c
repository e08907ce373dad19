/* SPDX-License-Identifier: MIT */
/*
 * How long the leader busy-polls before it sleeps in poll().
 *
 * Shared state: struct tcp_spin inside struct tcp_wire. Only the leader
 * reads or updates it, and leadership passes under w->mu, so the mutex
 * hand-over orders every access; no atomics are needed. The process-wide
 * count of spinning leaders (spinners) and the host reading are atomic.
 *
 * With ZAP_TCP_SPIN_US set, the budget is that number (0: never spin).
 * Unset, it is learned: every wait that ends with work for the leader
 * feeds an exponentially weighted mean of how long waits last. While that
 * mean is short (a peer answering within tens of microseconds), spinning
 * for a few times the mean catches the next message before the kernel's
 * sleep and wake-up would (bench/MEASUREMENTS.md, "spin-learned"). Once waits grow
 * long (traffic stopped, or a slow peer), one long wait pushes the mean
 * past the limit and the budget drops to zero at once: an idle endpoint
 * sleeps from its next wait on and burns nothing.
 *
 * A stream's receiver waits mostly a few microseconds and now and then
 * much longer while the sender refills its socket; three times the mean
 * slept through those, so the budget also covers the longest recent wait up to SPIN_MAX_NS (peak_ns,
 * decaying by 1/8 a wait).
 *
 * Oversubscription: a spinning thread may be holding the core its peer
 * needs. A learned spin does not start while the host's runnable threads
 * outnumber its CPUs (host_oversubscribed()); the thread yields once and
 * looks again before it sleeps instead. Spinning processes cannot see
 * each other's spins, and yielding (below) was not enough: several
 * ping-pong pairs on two cores made fewer round trips learning than never
 * spinning until the check and the one yield came (bench/MEASUREMENTS.md,
 * "spin-oversubscribed"). Nor does a leader start spinning while as many
 * leaders of this process spin as it has CPUs to run on, and a spin yields
 * the CPU every SPIN_YIELD_NS, so a peer process sharing the core runs
 * instead of waiting out our time slice. A yield that took
 * SPIN_CONTENDED_NS or more ran another thread: the core is shared, and
 * for the next SPIN_COOL_WAITS waits the spin yields every round (with
 * rings, every SPIN_RING_ROUNDS rounds), handing the core to the peer as
 * soon as we have nothing to do. Alone on a core, a yield costs a trip
 * through the scheduler for nothing, which a 64 B round trip shows, so
 * only a shared core yields every round. A long yield after which the
 * core-wanted flag we set is gone ran a thread of ours that gave the core
 * back (a large message's sender between two records or parts): our own
 * stream shares the core, not the peer we wait for, and yielding every
 * round would only hand the core back to the stream while the answer we
 * wait for is already there ("spin-own-stream"); it does not count.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "tcp_int.h"

/* Learned budgets lie in [MIN, MAX]; a mean wait above LIMIT: no spin.
 * MIN is about what a sleep and its wake-up cost here (25-30 us,
 * bench/MEASUREMENTS.md, "spin-learned"): a spin that gives up sooner
 * pays that cost for a message arriving a little later, and one that
 * lasts as long as the cost wastes at most as much as it can save. With
 * 10 us, a vote's echo behind a 64 MiB stream slept through half the
 * time (its round trip's median 21-26 us, against 9-10 us with 30;
 * "spin-min"). */
#define SPIN_MIN_NS 30000u
#define SPIN_MAX_NS 200000u
#define SPIN_LIMIT_NS 200000u
/* A sample is capped so that the mean recovers in ~20 short waits. */
#define SPIN_SAMPLE_CAP_NS (8u * SPIN_LIMIT_NS)

static atomic_uint spinners;
atomic_bool tw_core_wanted;

static unsigned cpus_usable(void)
{
	static atomic_uint cached;
	unsigned n = atomic_load_explicit(&cached, memory_order_relaxed);
	cpu_set_t set;

	if (n)
		return n;
	n = 1;
	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		n = (unsigned)CPU_COUNT(&set);
	atomic_store_explicit(&cached, n, memory_order_relaxed);
	return n;
}

/*
 * Whether the host's runnable threads outnumber its online CPUs by more
 * than one: the kernel's count of running threads is the fourth field of
 * /proc/loadavg ("running/total", the reader included). One spare, for a
 * spinning pair alone on two cores now and then reads one more (a kernel
 * worker, or a process waking for a moment). One thread of the process
 * reads it at most every SPIN_HOST_NS, the others use that reading, so the
 * read (open, read, close) costs a spinning thread little
 * (bench/MEASUREMENTS.md, "spin-oversubscribed"). Without /proc: never
 * oversubscribed.
 */
#define SPIN_HOST_NS 1000000u
static atomic_uint_fast64_t host_read_ns;
static atomic_bool host_busy;

static bool host_oversubscribed(uint64_t now)
{
	static atomic_uint online;
	uint_fast64_t last = atomic_load_explicit(&host_read_ns, memory_order_relaxed);
	unsigned running = 0, total = 0, cpus;
	char buf[128];

	/* One thread takes the reading; the others keep the last one. */
	if ((last && now - last < SPIN_HOST_NS) ||
	    !atomic_compare_exchange_strong(&host_read_ns, &last, now))
		return atomic_load_explicit(&host_busy, memory_order_relaxed);
	cpus = atomic_load_explicit(&online, memory_order_relaxed);
	if (!cpus) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		cpus = n > 0 ? (unsigned)n : 1;
		atomic_store_explicit(&online, cpus, memory_order_relaxed);
	}
	int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (len > 0) {
		buf[len] = '\0';
		if (sscanf(buf, "%*s %*s %*s %u/%u", &running, &total) != 2)
			running = 0;
	}
	bool busy = running > cpus + 1;
	atomic_store_explicit(&host_busy, busy, memory_order_relaxed);
	return busy;
}

void tw_spin_init(struct tcp_spin *s, bool fixed, unsigned fixed_us)
{
	s->fixed = fixed;
	s->fixed_ns = (uint64_t)fixed_us * 1000u;
	/* Start as if waits were short: the first messages of a
	 * conversation then spin, and an idle endpoint stops after one. */
	s->mean_ns = SPIN_MIN_NS;
	s->peak_ns = 0;
	s->cool = 0;
}

uint64_t tw_spin_budget(const struct tcp_spin *s)
{
	uint64_t b;

	if (s->fixed)
		return s->fixed_ns;
	if (s->mean_ns > SPIN_LIMIT_NS)
		return 0;
	b = 3 * s->mean_ns;
	if (b < s->peak_ns)
		b = s->peak_ns;
	return b < SPIN_MIN_NS ? SPIN_MIN_NS : b > SPIN_MAX_NS ? SPIN_MAX_NS : b;
}

void tw_spin_learn(struct tcp_spin *s, uint64_t waited_ns)
{
	if (s->fixed)
		return;
	/* The longest recent wait a spin could have covered (above). */
	s->peak_ns -= s->peak_ns / 8;
	if (waited_ns <= SPIN_MAX_NS && waited_ns > s->peak_ns)
		s->peak_ns = waited_ns;
	if (waited_ns > SPIN_SAMPLE_CAP_NS)
		waited_ns = SPIN_SAMPLE_CAP_NS;
	/* Weight 1/4: quick to back off, a few samples to come back. */
	if (waited_ns > s->mean_ns)
		s->mean_ns += (waited_ns - s->mean_ns) / 4;
	else
		s->mean_ns -= (s->mean_ns - waited_ns) / 4;
}

/*
 * Busy-poll @pfd until @end_ns, yielding as above (@eager: contended);
 * > 0 as poll(), or 0 at @end_ns or, with *@work set, when @ready says
 * there is work; *@contended set when a yield ran another thread; *@seen_ns
 * the clock when the spin starts (the caller's reading) and, on return,
 * when last read. With @rings, @ready reads shared memory
 * (tcp_shm.c), a few loads: it is asked every round, before the clock, and
 * the descriptors only every SPIN_FDS_NS, for a poll() round costs more
 * than that, which a message arriving meanwhile waits out
 * (bench/MEASUREMENTS.md, "spin-poll").
 */
#define SPIN_FDS_NS 4000u
#define SPIN_RING_ROUNDS 32u
#define SPIN_YIELD_NS 10000u
#define SPIN_CONTENDED_NS 20000u
#define SPIN_COOL_WAITS 64u
static int spin_rounds(struct pollfd *pfd, size_t n, uint64_t end_ns,
		       bool (*ready)(void *, bool), void *arg, bool rings, bool eager,
		       bool *contended, bool *work, uint64_t *seen_ns)
{
	uint64_t yield_ns = *seen_ns, fds_ns = yield_ns;

	for (unsigned i = 1;; i++) {
		/* With rings, the first look is at them: a message there is
		 * the common case, and a poll() round would delay it. */
		bool fds = !rings || *seen_ns - fds_ns >= SPIN_FDS_NS;
		if (fds) {
			int r = poll(pfd, n, 0);

			if (r)
				return r;
			fds_ns = *seen_ns;
		}
		if (ready(arg, false)) {
			*work = true;
			return 0;
		}
		uint64_t now = now_ns();
		*seen_ns = now;
		if (now >= end_ns)
			return 0;
		/* Contended, with rings, a yield every SPIN_RING_ROUNDS
		 * rounds hands the core over about as often as TCP's poll()
		 * rounds do. */
		if ((eager && (fds || i % SPIN_RING_ROUNDS == 0)) ||
		    now - yield_ns >= SPIN_YIELD_NS) {
			atomic_store_explicit(&tw_core_wanted, true,
					      memory_order_relaxed);
			sched_yield();
			yield_ns = now_ns();
			/* A thread of ours that gave the core back (a large
			 * message's sender, between two records or parts) took
			 * the flag: a core shared with our own stream, not with
			 * the peer we wait for, which yielding every round would
			 * only hand back to that stream ("spin-own-stream"). */
			if (yield_ns - now >= SPIN_CONTENDED_NS &&
			    atomic_load_explicit(&tw_core_wanted, memory_order_relaxed))
				*contended = true;
		}
	}
}

int tw_spin_poll(struct tcp_spin *s, struct pollfd *pfd, size_t n, int timeout,
		 bool (*ready)(void *arg, bool sleeping), void *arg, bool rings)
{
	uint64_t t0 = now_ns(), budget = tw_spin_budget(s), end, seen = t0;
	int r = 0;

	if (timeout == 0)
		return poll(pfd, n, 0);
	bool contended = false, work = false, eager = s->cool > 0;
	if (s->cool)
		s->cool--;
	if (budget && !s->fixed && host_oversubscribed(t0)) {
		/* No spin, but hand the CPU over once and look again before
		 * sleeping: the thread that runs may be the peer we wait for,
		 * and its reply then costs no sleep and wake-up (measured in
		 * the comment at the top). */
		atomic_store_explicit(&tw_core_wanted, true, memory_order_relaxed);
		sched_yield();
		r = poll(pfd, n, 0);
		seen = now_ns();
		work = !r && ready(arg, false);
	} else if (budget && atomic_fetch_add(&spinners, 1) < cpus_usable()) {
		end = t0 + budget;
		if (timeout > 0 && end > t0 + (uint64_t)timeout * 1000000u)
			end = t0 + (uint64_t)timeout * 1000000u;
		r = spin_rounds(pfd, n, end, ready, arg, rings, eager, &contended, &work,
				&seen);
		if (contended)
			s->cool = SPIN_COOL_WAITS;
		atomic_fetch_sub(&spinners, 1);
	} else if (budget) {
		atomic_fetch_sub(&spinners, 1);
	}
	/* No descriptor is ready: unless the spin found work, or @ready
	 * has some as it announces the sleep on shared memory, sleep in
	 * poll(). Announcing it after the spin found work would write the
	 * ring's shared flags for nothing, and a producer that saw the flag
	 * set would wake us through the side channel (a system call each
	 * side) for a message already taken. */
	if (!r && !work && !ready(arg, true)) {
		if (timeout > 0) {
			uint64_t spent_ms = (now_ns() - t0) / 1000000u;

			timeout = spent_ms >= (uint64_t)timeout ? 0
								: timeout - (int)spent_ms;
		}
		r = poll(pfd, n, timeout);
	}
	/* A wait that timed out counts too: it was long, and nothing came.
	 * One the spin ended with work lasted about to the spin's last clock
	 * read, and a read more would delay the message. */
	if (r >= 0)
		tw_spin_learn(s, (work ? seen : now_ns()) - t0);
	return r;
}
