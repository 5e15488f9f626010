import threading, time, os, signal, sys
print("step 1 loss 0.5", flush=True)
print("warning: something", file=sys.stderr, flush=True)
def helper_loop():
    while True:
        time.sleep(0.1)
def train():
    threading.Thread(target=helper_loop, name="helper", daemon=True).start()
    time.sleep(0.3)
    wait_here()
def wait_here():
    time.sleep(1000)
if __name__ == "__main__":
    train()
