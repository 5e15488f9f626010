#include <unistd.h>
#include <pthread.h>
static void* spin(void* a){ (void)a; for(;;) pause(); return 0; }
static void wait_forever(void){ sleep(1000); }
int main(void){ pthread_t t; pthread_create(&t,0,spin,0); wait_forever(); return 0; }
