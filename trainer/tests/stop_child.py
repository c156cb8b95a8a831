"""Child process of test_stop: counts steps until watch_for_stop() says stop.

    stop_child.py single [--ignore-stop]
    stop_child.py jax COORDINATOR PROCESS_COUNT PROCESS_INDEX [--no-preemption-service]

Prints "READY" once watching, then "STOP <step>" and exits 143 at the stop step.
"""

import sys
import time


def main():
    mode = sys.argv[1]
    if mode == "jax":
        import jax

        if "--no-preemption-service" in sys.argv:
            jax.config.update("jax_enable_preemption_service", False)
        jax.distributed.initialize(
            coordinator_address=sys.argv[2], num_processes=int(sys.argv[3]), process_id=int(sys.argv[4])
        )
    import podq_trainer

    stop = podq_trainer.watch_for_stop()
    print("READY distributed=%s" % stop.distributed, flush=True)
    step = 0
    while True:
        if stop.reached(step) and "--ignore-stop" not in sys.argv:
            print("STOP %d" % step, flush=True)
            sys.exit(podq_trainer.EXIT_STOPPED)
        time.sleep(0.01)
        step += 1


if __name__ == "__main__":
    main()
