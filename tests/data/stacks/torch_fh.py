import torch, time, threading
def worker():
    while True:
        time.sleep(0.05)
def main():
    threading.Thread(target=worker, daemon=True).start()
    x = torch.ones(3)
    print("ready", flush=True)
    time.sleep(1000)
main()
