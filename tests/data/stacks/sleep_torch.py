import torch, time, threading
def worker():
    time.sleep(1000)
def main():
    threading.Thread(target=worker, daemon=True).start()
    time.sleep(1000)
main()
