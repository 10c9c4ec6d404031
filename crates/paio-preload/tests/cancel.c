/* pthread_cancel of a thread blocked in read() inside the interposer. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static int p[2];
static void *t(void *a){(void)a;char b[8];read(p[0],b,8);return NULL;}
int main(void){pipe(p);pthread_t th;pthread_create(&th,NULL,t,NULL);usleep(100000);pthread_cancel(th);void*r;pthread_join(th,&r);printf("cancelled=%d\n",r==PTHREAD_CANCELED);return 0;}
